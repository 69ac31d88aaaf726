"""What a run learns: the loss of a batch, the metrics of a loss, and the contract a model
must meet (runtime.tasks.base.Task). `task._target_` picks one: language modelling
(runtime.tasks.lm), image classification (runtime.tasks.vision) or the distillation toy
(runtime.tasks.distill)."""
