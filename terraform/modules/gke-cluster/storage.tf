# Checkpoint bucket of the cluster (runtime.checkpoint writes there), with access logs.

resource "google_storage_bucket" "access_logs" {
  #checkov:skip=CKV_GCP_62:This is the access-log sink itself; logging it into itself would loop.
  name                        = "${var.project}-${var.name}-access-logs"
  project                     = var.project
  location                    = upper(var.region)
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  versioning {
    enabled = true
  }
}

resource "google_storage_bucket" "checkpoints" {
  name                        = "${var.project}-${var.name}-checkpoints"
  project                     = var.project
  location                    = upper(var.region)
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  versioning {
    enabled = true
  }
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.checkpoint_retention_days
    }
    action {
      type = "Delete"
    }
  }
  logging {
    log_bucket = google_storage_bucket.access_logs.name
  }
}
