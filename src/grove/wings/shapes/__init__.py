"""Pictures of coloured shapes: a task a small vision-language model learns on a CPU (``grove[vision]``)."""
