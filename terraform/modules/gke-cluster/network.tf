# The cluster's VPC, and the additional node networks of the GPU pools: TCPX/TCPXO give each
# GPU NIC its own VPC; RDMA machines (A3 Ultra, A4, A4X) have a gVNIC on a regular VPC of its
# own and their RDMA NICs in subnets of one VPC on the zone's RoCE network profile (GKE docs
# "Maximize GPU network bandwidth"; https://cloud.google.com/vpc/docs/rdma-network-profiles).
# VPC and subnet names come from the catalog (generator/platform/networks.py), which names
# them in the cluster's GKENetworkParamSet objects too.

locals {
  vpc_per_nic = { for name, n in var.node_networks : name => n if n.layout == "vpc_per_nic" }
  roce_nics   = { for name, n in var.node_networks : name => n if n.layout == "roce_vpc" }
  nic_index   = { for i, name in sort(keys(var.node_networks)) : name => i }
}

resource "google_compute_network" "main" {
  name                    = var.name
  project                 = var.project
  auto_create_subnetworks = false
}

resource "google_compute_subnetwork" "main" {
  name                     = var.name
  project                  = var.project
  region                   = var.region
  network                  = google_compute_network.main.id
  ip_cidr_range            = var.node_cidr
  private_ip_google_access = true

  secondary_ip_range {
    range_name    = "pods"
    ip_cidr_range = var.pod_cidr
  }
  secondary_ip_range {
    range_name    = "services"
    ip_cidr_range = var.service_cidr
  }
  log_config {
    aggregation_interval = "INTERVAL_5_MIN"
    flow_sampling        = 0.5
    metadata             = "INCLUDE_ALL_METADATA"
  }
}

# Private nodes reach registries outside Google (Helm charts, add-on images) through NAT.
resource "google_compute_router" "main" {
  name    = var.name
  project = var.project
  region  = var.region
  network = google_compute_network.main.id
}

resource "google_compute_router_nat" "main" {
  name                               = var.name
  project                            = var.project
  region                             = var.region
  router                             = google_compute_router.main.name
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}

resource "google_compute_network" "gpu" {
  for_each                = local.vpc_per_nic
  name                    = each.value.vpc
  project                 = var.project
  auto_create_subnetworks = false
  mtu                     = each.value.mtu
}

resource "google_compute_network" "roce" {
  count                   = length(local.roce_nics) > 0 ? 1 : 0
  name                    = one(distinct([for n in values(local.roce_nics) : n.vpc]))
  project                 = var.project
  auto_create_subnetworks = false
  mtu                     = max([for n in values(local.roce_nics) : n.mtu]...)
  network_profile         = "projects/${var.project}/global/networkProfiles/${var.roce_zone}-vpc-roce"
}

resource "google_compute_subnetwork" "gpu" {
  for_each                 = var.node_networks
  name                     = each.value.subnet
  project                  = var.project
  region                   = var.region
  network                  = each.value.layout == "vpc_per_nic" ? google_compute_network.gpu[each.key].id : google_compute_network.roce[0].id
  ip_cidr_range            = cidrsubnet(var.gpu_cidr, 8, local.nic_index[each.key])
  private_ip_google_access = true
  log_config {
    aggregation_interval = "INTERVAL_5_MIN"
    flow_sampling        = 0.5
    metadata             = "INCLUDE_ALL_METADATA"
  }
}

# Node, pod and GPU NIC traffic stays inside the cluster's own ranges; nothing is opened to
# the internet (the control plane is reached through master_authorized_networks).
resource "google_compute_firewall" "main_internal" {
  name          = "${var.name}-internal"
  project       = var.project
  network       = google_compute_network.main.id
  direction     = "INGRESS"
  source_ranges = [var.node_cidr, var.pod_cidr, var.master_cidr]
  allow {
    protocol = "all"
  }
  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "gpu_internal" {
  for_each      = local.vpc_per_nic
  name          = "${var.name}-${each.key}-internal"
  project       = var.project
  network       = google_compute_network.gpu[each.key].id
  direction     = "INGRESS"
  source_ranges = [var.gpu_cidr]
  allow {
    protocol = "all"
  }
  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "roce_internal" {
  count         = length(google_compute_network.roce)
  name          = "${var.name}-roce-internal"
  project       = var.project
  network       = google_compute_network.roce[0].id
  direction     = "INGRESS"
  source_ranges = [var.gpu_cidr]
  allow {
    protocol = "all"
  }
}
