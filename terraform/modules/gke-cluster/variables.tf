# Inputs of one GKR cluster. Every value comes from the catalog through the root that
# `gkr render` generates in terraform/clusters/<name>/main.tf.json; nothing is typed by hand.

variable "name" {
  description = "Cluster name (clusters/<name>.yaml)."
  type        = string
}

variable "project" {
  description = "GCP project of the cluster."
  type        = string
}

variable "region" {
  description = "Region of the regional control plane."
  type        = string
}

variable "zones" {
  description = "Zones of the cluster's node pools."
  type        = list(string)
}

variable "release_channel" {
  description = "GKE release channel."
  type        = string
}

variable "node_cidr" {
  description = "Primary range of the node subnet."
  type        = string
}

variable "pod_cidr" {
  description = "Secondary range for pods."
  type        = string
}

variable "service_cidr" {
  description = "Secondary range for services."
  type        = string
}

variable "master_cidr" {
  description = "The /28 of the private control plane."
  type        = string
}

variable "admin_cidrs" {
  description = "Networks allowed to reach the control plane."
  type        = list(string)
}

variable "gpu_cidr" {
  description = "Range the additional node networks' subnets are carved from, a /24 each."
  type        = string
}

variable "checkpoint_retention_days" {
  description = "Days noncurrent checkpoint object versions are kept."
  type        = number
}

variable "head_pool" {
  description = "CPU node pool for Ray heads."
  type = object({
    name         = string
    machine_type = string
    nodes        = number
  })
}

variable "accelerator_pools" {
  description = "GPU node pools by accelerator name, each on a specific future reservation."
  type = map(object({
    node_pool         = string
    machine_type      = string
    gke_accelerator   = string
    gpus_per_node     = number
    nodes             = number
    zone              = string
    reservation       = string
    compact_placement = bool
    taints            = list(object({ key = string, value = string, effect = string }))
    node_networks     = list(string)
  }))
}

variable "node_networks" {
  description = "Additional node networks (gVNIC and GPU NICs) by name: layout (a VPC of its own, or a subnet of the one RoCE VPC), MTU, VPC and subnet names."
  type = map(object({
    layout = string
    mtu    = number
    vpc    = string
    subnet = string
  }))
  validation {
    condition     = alltrue([for n in values(var.node_networks) : contains(["vpc_per_nic", "roce_vpc"], n.layout)])
    error_message = "layout must be vpc_per_nic or roce_vpc."
  }
  validation {
    condition     = length(distinct([for n in values(var.node_networks) : n.vpc if n.layout == "roce_vpc"])) <= 1
    error_message = "the RDMA networks must share one RoCE VPC."
  }
}

variable "roce_zone" {
  description = "Zone whose RoCE network profile the RDMA VPC uses; null without RDMA pools."
  type        = string
  default     = null
}

variable "rbac_security_group" {
  description = "Google group (gke-security-groups@<domain>) whose nested groups RBAC may bind."
  type        = string
}
