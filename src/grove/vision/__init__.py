"""Images in the loop: the pixel table that travels beside a batch, the vision-language families grove trains, their
processors and prompts with images. It imports nothing of grove's but :mod:`grove.optional_packages`, so the batch,
the rollout engines and the models all build on it."""
