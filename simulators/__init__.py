"""Wire-faithful runtime simulators (vLLM, SGLang, TensorRT-LLM, TGI); see README.md."""
