"""What a training run is, below every component: its typed config, batch streams, resume
points and progress (runtime.train drives it; runtime.ft, .crash and .diloco take part)."""
