"""Reusable auxiliary-service presets (Hydra group `aux`)."""
