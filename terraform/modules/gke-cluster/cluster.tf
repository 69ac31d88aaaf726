# A regional GKE cluster with a managed control plane (seed §3.1): private nodes, Workload
# Identity, Dataplane V2 and multi-networking (GPU NICs are extra pod networks).

resource "google_service_account" "nodes" {
  account_id   = "${var.name}-nodes"
  project      = var.project
  display_name = "GKE nodes of ${var.name}"
}

# The least a node needs: write logs and metrics, pull images.
resource "google_project_iam_member" "nodes" {
  for_each = toset([
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/artifactregistry.reader",
  ])
  project = var.project
  role    = each.value
  member  = "serviceAccount:${google_service_account.nodes.email}"
}

resource "google_container_cluster" "this" {
  #checkov:skip=CKV_GCP_24:PodSecurityPolicy was removed from Kubernetes in 1.25; Pod Security Admission labels on every namespace replace it.
  #checkov:skip=CKV_GCP_12:Dataplane V2 (ADVANCED_DATAPATH) enforces NetworkPolicy itself; the legacy Calico network_policy block must stay off with it.
  #checkov:skip=CKV_GCP_66:Binary Authorization is enforced below (PROJECT_SINGLETON_POLICY_ENFORCE); the check reads a field older providers used.
  name                     = var.name
  project                  = var.project
  location                 = var.region
  node_locations           = var.zones
  network                  = google_compute_network.main.id
  subnetwork               = google_compute_subnetwork.main.id
  remove_default_node_pool = true
  initial_node_count       = 1
  deletion_protection      = true
  networking_mode          = "VPC_NATIVE"
  datapath_provider        = "ADVANCED_DATAPATH"
  enable_multi_networking  = true
  enable_shielded_nodes    = true
  enable_legacy_abac       = false

  enable_intranode_visibility = true

  release_channel {
    channel = var.release_channel
  }
  ip_allocation_policy {
    cluster_secondary_range_name  = "pods"
    services_secondary_range_name = "services"
  }
  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = false
    master_ipv4_cidr_block  = var.master_cidr
  }
  master_authorized_networks_config {
    dynamic "cidr_blocks" {
      for_each = var.admin_cidrs
      content {
        cidr_block = cidr_blocks.value
      }
    }
  }
  master_auth {
    client_certificate_config {
      issue_client_certificate = false
    }
  }
  # RoleBindings of team namespaces name Google groups nested in this group.
  authenticator_groups_config {
    security_group = var.rbac_security_group
  }
  workload_identity_config {
    workload_pool = "${var.project}.svc.id.goog"
  }
  binary_authorization {
    evaluation_mode = "PROJECT_SINGLETON_POLICY_ENFORCE"
  }
  addons_config {
    gcs_fuse_csi_driver_config {
      enabled = true
    }
  }
  resource_labels = {
    managed-by = "gkr"
    cluster    = var.name
  }
  # The default pool is removed at once; its config only has to be as safe as the others.
  node_config {
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]
    shielded_instance_config {
      enable_secure_boot          = true
      enable_integrity_monitoring = true
    }
    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }
}
