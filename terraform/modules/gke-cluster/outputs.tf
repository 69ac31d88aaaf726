output "cluster_id" {
  description = "ID of the GKE cluster."
  value       = google_container_cluster.this.id
}

output "node_service_account" {
  description = "Service account of every node pool (granted image pulls by the registry root)."
  value       = google_service_account.nodes.email
}

output "checkpoint_bucket" {
  description = "Bucket the cluster's checkpoints are written to."
  value       = google_storage_bucket.checkpoints.url
}

output "gpu_subnetworks" {
  description = "Subnetworks of the additional node networks (gVNIC, GPU NICs) by network name."
  value       = { for name, s in google_compute_subnetwork.gpu : name => s.id }
}
