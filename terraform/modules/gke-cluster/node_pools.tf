# Node pools: the CPU pool for Ray heads, and one GPU pool per accelerator the catalog
# offers, each consuming its specific future reservation (seed §3.1). GKE labels nodes with
# their pool, accelerator and machine type, which is what rendered pods select on.

locals {
  node_config_common = {
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
  }
}

resource "google_container_node_pool" "heads" {
  name           = var.head_pool.name
  project        = var.project
  cluster        = google_container_cluster.this.id
  location       = var.region
  node_locations = var.zones
  node_count     = var.head_pool.nodes

  management {
    auto_repair  = true
    auto_upgrade = true
  }
  node_config {
    machine_type    = var.head_pool.machine_type
    image_type      = "COS_CONTAINERD"
    service_account = local.node_config_common.service_account
    oauth_scopes    = local.node_config_common.oauth_scopes
    metadata = {
      disable-legacy-endpoints = "true"
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }
}

resource "google_container_node_pool" "accelerators" {
  #checkov:skip=CKV_GCP_9:Warden repairs the GPU pools (drain, reboot, DCGM stress test, faulty-host report); GKE auto-repair would recreate the same nodes underneath it
  for_each       = var.accelerator_pools
  name           = each.value.node_pool
  project        = var.project
  cluster        = google_container_cluster.this.id
  location       = var.region
  node_locations = [each.value.zone]
  node_count     = each.value.nodes

  # Warden is the repair path of GPU nodes (seed §7): GKE's auto-repair would race its
  # reboots and recreate a node Warden is testing; repeated cordons escalate to a Compute
  # Engine faulty-host report instead (runtime/warden). Upgrades stay on, one node at a time.
  management {
    auto_repair  = false
    auto_upgrade = true
  }
  # A reservation has no spare machines to surge onto: replace nodes one at a time.
  upgrade_settings {
    strategy        = "SURGE"
    max_surge       = 0
    max_unavailable = 1
  }
  dynamic "placement_policy" {
    for_each = each.value.compact_placement ? [1] : []
    content {
      type = "COMPACT"
    }
  }
  # Additional node networks in interface order: eth1, eth2, … (an RDMA machine's gVNIC first).
  dynamic "network_config" {
    for_each = length(each.value.node_networks) > 0 ? [1] : []
    content {
      dynamic "additional_node_network_configs" {
        for_each = each.value.node_networks
        content {
          network    = google_compute_subnetwork.gpu[additional_node_network_configs.value].network
          subnetwork = google_compute_subnetwork.gpu[additional_node_network_configs.value].name
        }
      }
    }
  }
  node_config {
    machine_type    = each.value.machine_type
    image_type      = "COS_CONTAINERD"
    service_account = local.node_config_common.service_account
    oauth_scopes    = local.node_config_common.oauth_scopes
    metadata = {
      disable-legacy-endpoints = "true"
    }
    guest_accelerator {
      type  = each.value.gke_accelerator
      count = each.value.gpus_per_node
      gpu_driver_installation_config {
        gpu_driver_version = "LATEST"
      }
    }
    reservation_affinity {
      consume_reservation_type = "SPECIFIC_RESERVATION"
      key                      = "compute.googleapis.com/reservation-name"
      values                   = [each.value.reservation]
    }
    gvnic {
      enabled = true
    }
    dynamic "taint" {
      for_each = each.value.taints
      content {
        key    = taint.value.key
        value  = taint.value.value
        effect = taint.value.effect
      }
    }
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }
}
