# The Artifact Registry repository CI pushes training images to (seed §3.2); every
# cluster's node service account may pull from it.

terraform {
  required_version = ">= 1.5"
  required_providers {
    google = {
      source = "hashicorp/google"
    }
  }
}

variable "project" {
  description = "GCP project of the registry."
  type        = string
}

variable "location" {
  description = "Artifact Registry location (us, europe, or a region)."
  type        = string
}

variable "repository_id" {
  description = "Repository name."
  type        = string
}

variable "readers" {
  description = "IAM members allowed to pull images."
  type        = list(string)
}

resource "google_artifact_registry_repository" "images" {
  #checkov:skip=CKV_GCP_84:Images hold no secrets and Google-managed encryption is accepted by the platform's data policy; a KMS key would add a key ring per project to run.
  project       = var.project
  location      = var.location
  repository_id = var.repository_id
  format        = "DOCKER"
  description   = "GKR training images, pinned by digest in platform/catalog/images.yaml."
  # Jobs pin images by digest; immutable tags keep a tag from moving under a review.
  docker_config {
    immutable_tags = true
  }
}

resource "google_artifact_registry_repository_iam_member" "readers" {
  for_each   = toset(var.readers)
  project    = var.project
  location   = var.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.reader"
  member     = each.value
}

output "repository" {
  description = "Image path prefix of the repository."
  value       = "${var.location}-docker.pkg.dev/${var.project}/${var.repository_id}"
}
