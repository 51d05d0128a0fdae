"""The simulated NPU's numerics contract, as one table (GUIDE §3).

Each op class says how a kernel of that class computes when its precision is FP16, which default mixed-
precision list it is on, and the FP16 noise a comparator should expect from an ordinary (non-faulty) kernel.

==================  ==============================================  =============  =======================
op class            FP16 kernel computes                            default list   expected FP16 noise
==================  ==============================================  =============  =======================
cube                FP16 inputs, FP32 accumulation, output rounded  white          rtol 4e-3, atol 1e-3
vector              FP16 inputs, FP32 compute, output rounded       gray           rtol 2e-3, atol 1e-4
vector_reduction    high_precision: as vector; high_performance:    black          rtol 4e-3, atol 1e-3
                    sums/statistics accumulated in FP16
data_movement       bit-exact on FP16 data                          gray           rtol 1e-3, atol 0
control / cpu       always FP32 on the host (AI_CPU)                n/a            exact
==================  ==============================================  =============  =======================

Sources: GUIDE §3 (the project's contract); FP16 unit roundoff 2**-11 ≈ 4.9e-4 (IEEE 754 binary16).
Fused kernels keep intermediates in FP32; only kernel outputs are rounded to their storage dtype.

A kernel that computes in FP32 from FP32 data is not exact either: our kernels and onnxruntime sum in
different orders, so their FP32 results differ by FP32 rounding (:data:`FP32_ROUNDING`, rtol 1e-5, atol 0:
one ulp of 1.9e8 is 16, so a tight absolute line such as RootMeanSquareError > 1 cannot hold there).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Largest finite FP16 value.
FP16_MAX = 65504.0
#: Smallest positive normal FP16 value.
FP16_MIN_NORMAL = 6.103515625e-05
#: Values below half the smallest FP16 subnormal (2**-24 ≈ 5.96e-8) round to zero.
FP16_UNDERFLOW = 2.0**-25
#: Integers above this lose exactness in FP16 (2**11).
FP16_INT_EXACT = 2048
#: FP32 unit roundoff (IEEE 754 binary32, round to nearest): 2**-24 ≈ 5.96e-8.
FP32_UNIT_ROUNDOFF = 2.0**-24
#: The expected noise ({"rtol", "atol"}) of a kernel that computes in FP32 from FP32 data, i.e. not affected by
#: FP16 rounding (a force_fp32 plan, a node kept in FP32 upstream of any FP16 data). Each FP32 operation
#: rounds by at most u = :data:`FP32_UNIT_ROUNDOFF`; a sum of K terms accumulated in another order than the
#: reference's (tiled, pairwise or blocked against onnxruntime's MLAS order) differs by ~sqrt(K)·u of the
#: magnitude of its terms in root mean square (rounding errors of random sign), K·u at worst. rtol 1e-5 ≈ 168·u
#: covers sqrt(K)·u for reductions up to K ≈ 28,000 terms and a few chained elementwise ops on top; it is
#: relative (atol 0) because FP32 rounding is (the noise test floors it at the tensor's RMS magnitude,
#: toolkit.compare.metrics.reductions.noise_scale, so values that cancel to near zero keep their operands'
#: rounding). It is 100 times below the smallest FP16 allowance (rtol 1e-3) and FP16's unit roundoff (4.9e-4),
#: so a real fault (a wrong constant or rewrite, off by 1e-4 relative or more) is not excused. Like the FP16
#: allowance it excuses the tool's default lines only (toolkit.compare.metrics.noise_covers).
FP32_ROUNDING = {"rtol": 1e-5, "atol": 0.0}
#: Ops whose FP32 result carries the rounding of its operands at the operands' magnitude: a sum or difference
#: of values each rounded relative to itself is off by up to rtol·(|a| + |b|), which a cancellation (two near-equal
#: values ~9586 subtracted) makes large against a small result. The compile-stage triage judges these ops' FP32
#: rounding at the larger of the result's and the operands' RMS magnitude (toolkit.diagnose.triage).
FP32_CANCELLING_OPS = frozenset({"Add", "Sub", "Sum", "Mean"})


@dataclass(frozen=True)
class OpClass:
    name: str
    ops: frozenset
    default_list: str  # "white" | "black" | "gray" | "none"
    rtol: float
    atol: float
    fp16_accumulate_in_high_performance: bool = False


CUBE = OpClass("cube", frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger",
                                  "QLinearConv", "QLinearMatMul", "Einsum"}), "white", 4e-3, 1e-3)
VECTOR_REDUCTION = OpClass("vector_reduction", frozenset({
    "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", "Softmax", "LogSoftmax", "LayerNormalization", "RMSNormalization", "GroupNormalization",
    "InstanceNormalization", "BatchNormalization", "LpNormalization", "MeanVarianceNormalization", "CumSum",
    "GlobalAveragePool", "GlobalLpPool", "AveragePool", "LpPool"}), "black", 4e-3, 1e-3, True)
#: Elementwise math whose FP16 result is at risk (range or precision); on the default black list.
RISKY_VECTOR_OPS = frozenset({"Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Softplus", "Erf", "Tan", "Cosh",
                              "Sinh", "Acos", "Asin", "Atan", "Acosh", "Asinh", "Atanh"})
DATA_MOVEMENT = OpClass("data_movement", frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth", "Resize", "Upsample",
    "ScatterElements", "ScatterND", "Shape", "Size", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin",
    "Max", "Min", "ArgMax", "ArgMin", "TopK", "Where", "Relu", "Clip", "Abs", "Neg", "Sign", "Floor", "Ceil",
    "Round", "Compress", "NonZero", "ConstantOfShape", "Range", "OneHot", "EyeLike", "Trilu", "ReverseSequence"}),
    "gray", 1e-3, 0.0)
CONTROL = OpClass("control", frozenset({"If", "Loop", "Scan", "SequenceMap", "NonMaxSuppression", "Unique",
                                        "StringNormalizer", "RandomNormal", "RandomUniform", "RandomNormalLike",
                                        "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout",
                                        "SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase",
                                        "SequenceLength", "SequenceEmpty", "SplitToSequence", "ConcatFromSequence",
                                        "Optional", "OptionalGetElement", "OptionalHasElement", "RNN", "GRU",
                                        "LSTM"}), "none", 0.0, 0.0)
VECTOR = OpClass("vector", frozenset(), "gray", 2e-3, 1e-4)

#: The table, in lookup order; VECTOR is the default for any op not listed.
OP_CLASSES = (CUBE, VECTOR_REDUCTION, DATA_MOVEMENT, CONTROL)


def op_class(op_type: str) -> OpClass:
    """The contract class of an ONNX op type (default: ``vector``)."""
    for cls in OP_CLASSES:
        if op_type in cls.ops:
            return cls
    return VECTOR


def by_name(name: str) -> OpClass:
    for cls in (*OP_CLASSES, VECTOR):
        if cls.name == name:
            return cls
    raise KeyError(name)


def default_mixlists() -> dict[str, set[str]]:
    """The default allow_mix_precision lists: {'white-list': {...}, 'black-list': {...}, 'gray-list': {...}}.

    White: cube ops. Black: reductions/normalisations and risky elementwise math (Exp, Log, Pow, ...). Every
    other op is gray (follows the precision of its float inputs).
    """
    return {"white-list": set(CUBE.ops), "black-list": set(VECTOR_REDUCTION.ops) | set(RISKY_VECTOR_OPS),
            "gray-list": set()}


def expected_noise(op_class_name: str) -> dict[str, float]:
    """{'rtol', 'atol'} of ordinary FP16 rounding for a class (used by comparators)."""
    cls = by_name(op_class_name)
    return {"rtol": cls.rtol, "atol": cls.atol}


def expected_fp32_noise() -> dict[str, float]:
    """{'rtol', 'atol'} of ordinary FP32 rounding (:data:`FP32_ROUNDING`, a copy): the expected noise of a kernel
    that computes in FP32 from FP32 data, whatever its op class."""
    return dict(FP32_ROUNDING)
