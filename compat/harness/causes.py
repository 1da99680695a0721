"""Why a probe failed, when the failure is not the contract: the environment or our fixture.

Only a contract failure (the vLLM/speculators API or the data it returns) may read `broken`.
A failure no registry entry explains whose exception says the environment lacks something
(a module outside vLLM/speculators, a compiled kernel, an attention backend, a driver, memory, a
port) or that this build cannot serve our tiny model (head dims, architecture) reads `error` with
its cause and what to do; a registry entry may still claim any of them as known (the registry is
asked first). Each rule names the exception types and a message pattern, as registry entries do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from compat.harness.checked import CheckedProbe
from compat.shared.records import Cause, ProbeError, ProbeRecord, ProbeStatus
from compat.shared.tracebacks import MISSING_OP, RELAYS, SILENT

OURS = r"(?:vllm|speculators|hs_connectors)"


@dataclass(frozen=True)
class CauseRule:
    cause: Cause
    exceptions: tuple[str, ...]
    message: str
    todo: str

    def fits(self, error: ProbeError) -> bool:
        """The root cause a vLLM process printed fits, where one was kept (the probe's own exception
        then only relays it), else the probe's exception."""
        own = (str(error.type or ""), str(error.message or ""))
        root = str(error.root_cause or "")
        judged = [tuple(root.partition(": ")[::2])] if root else [own]
        if root and RELAYS.search(root):  # the kept root only relays too: the probe's own words count
            judged.append(own)
        return any((not self.exceptions or kind.rsplit(".", 1)[-1] in self.exceptions)
                   and bool(re.search(self.message, message)) for kind, message in judged)


RULES = (
    CauseRule(Cause.ENVIRONMENT, ("ModuleNotFoundError", "ImportError"), rf"No module named '(?!{OURS}\b)[\w.]+'",
              "install the missing package in the cell (a compiled extension the build or payload left out)"),
    CauseRule(Cause.ENVIRONMENT, (),
              r"FlashAttention version not detected|flash_attn\w* (?:is )?not (?:installed|available)"
              r"|FlashInfer (?:is )?not (?:installed|available)|requires flashinfer",
              "install the attention kernels this build expects (FlashAttention / FlashInfer), or pick an "
              "attention backend the environment has (--attention-backend)"),
    CauseRule(Cause.ENVIRONMENT, ("ImportError", "OSError"),
              r"version [`'‘]?(?:CXXABI|GLIBCXX|GLIBC)_[\d.]+['’]? not found",
              "a compiled library (the .so the message names; vLLM's own goes on without it, and its first compiled op "
              "fails) was built against a newer C/C++ runtime (libstdc++, glibc) than this machine's: run on a newer "
              "OS image, put a newer libstdc++ first on LD_LIBRARY_PATH (conda-forge's libstdcxx-ng), or install a "
              "build made for this system"),
    CauseRule(Cause.ENVIRONMENT, ("ImportError", "OSError"),
              r"\.so\S*: undefined symbol|\.so\S*, \w+\): Symbol not found",
              "a compiled library (the .so the message names) does not fit the torch installed beside it (built "
              "against another torch): install the torch that release pins"),
    CauseRule(Cause.ENVIRONMENT, ("ImportError", "OSError"), r"cannot open shared object file",
              "a shared library the compiled code needs (the message names it: the CUDA runtime, a driver's) is not on "
              "this machine or not on its library path: install it, or a build made for what this machine has"),
    CauseRule(Cause.ENVIRONMENT, ("ModuleNotFoundError", "ImportError"), r"No module named 'vllm\._\w*C\w*'",
              "this vLLM install has no compiled extension (a source checkout never built, or a build for another "
              "platform): install a vLLM wheel built for this platform"),
    # a compiled op missing, or the load failure behind it that no rule above names (it quotes the op)
    CauseRule(Cause.ENVIRONMENT, ("AttributeError", "RuntimeError", "NotImplementedError", "NameError", "ImportError",
                              "ModuleNotFoundError", "OSError"), MISSING_OP,
              "the vLLM build lacks a compiled kernel library: reinstall vLLM with its extensions"),
    CauseRule(Cause.ENVIRONMENT, (), r"\blib\w+ is not found in LD_PRELOAD",
              "this vLLM CPU build requires libraries preloaded (vLLM's CPU install guide, `set LD_PRELOAD`): "
              "install tcmalloc (apt-get install libtcmalloc-minimal4); the harness then preloads it and the "
              "venv's libiomp5.so for builds that refuse without them (compat.harness.cell_run.preloaded_libraries)"),
    CauseRule(Cause.ENVIRONMENT, (), r"CUDA out of memory|OutOfMemoryError|out of memory",
              "free GPU memory or lower --gpu-memory-utilization"),
    # vLLM's start-up check (vllm/v1/worker/utils.py): another process holds the memory the server was told to take
    CauseRule(Cause.ENVIRONMENT, ("ValueError", "ContractViolation"),
              r"Free memory on device (?:\S+ )?\([\d.]+/[\d.]+ GiB\) on startup is less than desired GPU memory "
              r"utilization",
              "another process holds GPU memory (an earlier server still exiting, or another job): wait for it to "
              "exit, or lower --gpu-memory-utilization"),
    CauseRule(Cause.ENVIRONMENT, (),
              re.escape(SILENT) + r"|exit code:? -9\b|code=-9\b|Failed core proc\(s\): \{[^}]*: -9\b",
              "a vLLM process died without raising (SIGKILL, or no exit code listed and nothing printed): most "
              "often the kernel's out-of-memory killer, which `dmesg` names; give it more memory or a smaller KV "
              "cache (VLLM_CPU_KVCACHE_SPACE, --gpu-memory-utilization) and run the cell again"),
    CauseRule(Cause.ENVIRONMENT, (), r"Address already in use|address already in use",
              "another process holds the port: stop it, or let the harness choose a free one"),
    CauseRule(Cause.ENVIRONMENT, (), r"No CUDA GPUs are available|CUDA driver version is insufficient|"
              r"NVIDIA driver on your system is too old|no kernel image is available for execution",
              "the GPU driver or device does not fit this torch build"),
    CauseRule(Cause.ENVIRONMENT, (), r"No valid attention backend|No attention backend (?:found|available)",
              "no attention backend of this build runs here: install one, or choose one with --attention-backend"),
    CauseRule(Cause.FIXTURE, (), r"does not support float32\. Please use bfloat16|requires BF16",
              "our tiny model is served in float32, which this build's kernel for it refuses (vLLM's Triton/FLA "
              "Gated DeltaNet: 'ChunkGatedDeltaRuleFunction does not support float32'): serve it in bfloat16"),
    CauseRule(Cause.PRECISION, (), r"\A\d+ of \d+ token rows set aside as 16-bit drift, more than \d+%: not batch noise"
              r"(?:; every one within relative [\d.]+ and still nearest its own row[^;]*)?\Z",
              "every drifted token stayed within the drift rule's bounds (relative error, still nearest its own row); "
              "only their share exceeded compat.cell.row_consistency.DRIFT's: re-run in float32 (MLA off) or on a "
              "larger model, where routing near-ties are rarer"),
    CauseRule(Cause.FIXTURE, (), r"does not have supported MLA dimensions|Head ?size \d+ is not supported"
              r"|head_size \d+ (?:is )?not supported|Unsupported head size",
              "our tiny model's head dimensions are not ones this build's kernels serve: use the fixture "
              "shaped for this backend (Kimi's head dims on GPUs)"),
)


def error_in(words: Any) -> Optional[ProbeError]:
    """An exception as a run's own words keep it (a probe's detail, a pasted log, the runner's JSON), typed; None
    where they keep none (not an object, or an empty one)."""
    if not isinstance(words, dict) or not words:
        return None
    where, root = words.get("where"), words.get("root_cause")
    return ProbeError(str(words.get("type") or ""), str(words.get("message") or ""),
                      str(where) if where else None, str(root) if root else None)


def cause_of(error: Optional[ProbeError]) -> Optional[CauseRule]:
    """The rule a failure fits, if it is the environment's or the fixture's."""
    if error is None:
        return None
    return next((rule for rule in RULES if rule.fits(error)), None)


def cause_of_error(probe: ProbeRecord) -> Optional[Cause]:
    """The cause of a probe that could not run (`error`), where its record shows one: a rule's, or
    the harness's own fault (an untagged exception in our code, as the cell's plugin words it)."""
    rule = cause_of(probe.error)
    if rule is not None:
        return rule.cause
    reason = str(probe.reason or "")
    if reason.startswith("harness fault"):
        return Cause.HARNESS
    if reason.startswith("timeout") or "did not run: " in reason:
        return Cause.ENVIRONMENT
    return None


def harness_fault_explained(probe: ProbeRecord) -> Optional[str]:
    """The reason where the cell called an untagged exception a harness fault but its root cause fits a rule (the
    machine's or our fixture's, e.g. a worker refused for want of tcmalloc): the cause and what to do, in place of
    "harness fault"; None otherwise."""
    rule = cause_of(probe.error)
    if rule is None or not str(probe.reason or "").startswith("harness fault"):
        return None
    return _not_contract(rule, _root_or_first(probe.error), " (the cell read a harness fault)")


def _not_contract(rule: CauseRule, shown: str, aside: str = "") -> str:
    """The reason a failure set aside by `rule` reads: its cause, what it said, what to do."""
    return f"{rule.cause}, not the contract{aside}: {shown[:200]}; what to do: {rule.todo}"


def _root_or_first(error: Optional[ProbeError]) -> str:
    """The root cause a vLLM process printed where one was kept, else the first line of the exception's message."""
    return str((error.root_cause if error is not None else None) or first_line(error))


def first_line(error: Optional[ProbeError]) -> str:
    """The first line of a failure's message ('' where it has none)."""
    lines = str(error.message if error is not None else "").strip().splitlines()
    return lines[0] if lines else ""


def rerun_blocked(first: Optional[ProbeError], second: Optional[ProbeError]) -> bool:
    """Whether a probe's second run (run again alone, its exception `second`) failed for the environment before it
    could ask, where the first did not: then it gave no second outcome (a fixture or precision cause is an answer,
    and compares)."""
    blocked = cause_of(second)
    return blocked is not None and blocked.cause is Cause.ENVIRONMENT and cause_of(first) is None


@dataclass(frozen=True)
class SubRun:
    """A run a probe's detail keeps beside its own, as the probe wrote it: the with-compat run (`detail.with_compat`)
    or the api_only run (`detail.api_only`). `words` is the whole (empty where the detail keeps none), for the
    readers of its symptoms and summaries (compat.shared.breakages.data_symptoms, the figure re-check)."""
    words: dict[str, Any]

    @classmethod
    def of(cls, probe: ProbeRecord, key: str) -> "SubRun":
        found = probe.detail.get(key)
        return cls(found if isinstance(found, dict) else {})

    @property
    def kept(self) -> bool:
        return bool(self.words)

    @property
    def status(self) -> Optional[str]:
        """Its status word as written (not checked against ProbeStatus: a record's own words are re-checked)."""
        said = self.words.get("status")
        return None if said is None else str(said)

    @property
    def error(self) -> Optional[ProbeError]:
        return error_in(self.words.get("error"))

    @property
    def detail(self) -> Any:
        return self.words.get("detail")

    @property
    def figures(self) -> Any:
        return self.words.get("figures")


def with_compat_run(probe: ProbeRecord) -> SubRun:
    """The with-compat run's own record, which the probe's detail keeps (`detail.with_compat`)."""
    return SubRun.of(probe, "with_compat")


def api_only_run(probe: ProbeRecord) -> SubRun:
    """The api_only run's record (exception-fixing adapters only), kept in the probe's detail (`detail.api_only`)."""
    return SubRun.of(probe, "api_only")


def with_compat_error(probe: ProbeRecord) -> Optional[ProbeError]:
    """The exception the probe's with-compat run recorded, if any."""
    return with_compat_run(probe).error


def with_compat_not_contract(probe: CheckedProbe, rule: CauseRule) -> CheckedProbe:
    """The probe with its with-compat run as `error` with the cause (the raw status stands, what it stated kept): a
    with-compat run the environment or our fixture stopped says nothing about the adapters."""
    record = probe.record
    return probe.set_aside(record.status, ProbeStatus.ERROR,
                           "with compat adapters: " + _not_contract(rule, _root_or_first(with_compat_error(record))))


def as_not_contract(probe: CheckedProbe, rule: CauseRule) -> CheckedProbe:
    """The probe as `error` with its cause, what it stated kept."""
    record = probe.record
    adapted = ProbeStatus.ERROR if record.with_compat is ProbeStatus.BROKEN else record.with_compat
    return probe.set_aside(ProbeStatus.ERROR, adapted, _not_contract(rule, first_line(record.error)), rule.cause)


# A probe that once met another probe's contract before its own (it built what that probe owns the way the release
# does): a record of the harness before the fix can hold the other probe's exception under this one. Such a record
# (probe set 0: a runner that wrote no manifest, older than these fixes) is labelled, never read as a finding.
# probe -> (the probe whose contract it met, the fix that isolated it)
ISOLATED_SINCE = {
    # 2cd8353 (2026-12-01): block_hasher builds Request's other keywords the version-proof way (request_signature's)
    "block_hasher": ("request_signature", "2cd8353"),
}
OLDER_HARNESS = "an older harness's record"  # how such a probe's note starts (the report shows it)


def older_harness_leak(probe: ProbeRecord, probes: list[ProbeRecord], probe_set: Optional[int],
                       harness_commit: Optional[str] = None) -> Optional[tuple[str, str]]:
    """(the probe whose contract `probe` met, the note) where its record was made before `probe` was isolated
    (ISOLATED_SINCE; a runner that recorded neither its probe set nor its harness commit: probe set 0, no commit)
    and it failed with exactly the exception that probe raised, which that probe's own record holds; None
    otherwise (a record that states its commit is a newer harness's: its failure is its own)."""
    owner, fix = ISOLATED_SINCE.get(probe.id, (None, ""))
    error = probe.error
    if owner is None or probe_set != 0 or probe.status is not ProbeStatus.BROKEN or error is None or harness_commit:
        return None
    said = (error.type, error.message)
    same = [p for p in probes if p.id == owner and p.status is ProbeStatus.BROKEN
            and p.error is not None and (p.error.type, p.error.message) == said]
    if not same:
        return None
    return owner, (f"{OLDER_HARNESS} (probe set 0, before {fix} isolated {probe.id} from {owner}): it holds "
                   f"{owner}'s exception ({error.type}: {first_line(error)[:120]}), that known breakage, not "
                   f"{probe.id}'s own contract, which this run did not reach as released (with the adapters: "
                   f"{probe.with_compat}); run the cell again with this harness to check it")
