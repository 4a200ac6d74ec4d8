"""Serving: the tritonserver container and its life (`container`: TritonServer), its readiness and
failed loads (`readiness`), its repository API for loading and unloading models (`model_control`),
and the memory it uses (`memory`). Building the image it runs is image/'s."""
