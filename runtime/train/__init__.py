"""The Ray training driver: `python -m runtime.train CONFIG.yaml key=value ...`."""

from runtime.run.config import TrainConfig, build_config
from runtime.train.compose import load_config

__all__ = ["TrainConfig", "build_config", "load_config"]
