"""The Prime Intellect verifiers environments, tasksets and rubrics hub adapter (``grove[verifiers]``)."""
