"""The jobs the plan makes: their groups, resources, inputs and code hash, the targets of a run, and
the weights a finished run lost."""
