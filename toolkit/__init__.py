"""npuscope: a simulated-NPU compile-and-execute engine and precision/profiling diagnostics for ONNX models."""

__version__ = "0.1.0"
