"""Built-in model presets (Hydra group `model`): `_target_` and its keyword arguments."""
