"""The compile cache: content-addressed on-disk entries that make a repeated compile of an unchanged model,
and the recompile of a model with one edited node, a lookup instead of a compile (docs/compile-cache.md).

Modules: settings (mode / folder / size limit), store (atomic, checksummed entry files, LRU eviction), keys
(what every key covers), compile_entry (a CompileResult as JSON + ONNX bytes), compile_cache (lookup and
store around compile_model), patch (value edits applied to a cached compile), kernel_entries (onnxruntime's
optimised kernel models and per-compile kernel recipes), workflow (``npuscope cache info|clear``).
"""
