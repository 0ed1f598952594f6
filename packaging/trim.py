"""What `make package` leaves out of the layers: an explicit, reviewed list, each entry with its reason.

Lambda allows 250 MiB unzipped for a function and all its layers. ModelStepFunction carries the core
layer, the model layer (litellm) and the stepwise layer: 262.8 MiB untrimmed, even with the model
layer leaving out what the core layer has. These rules take out what the runtime never imports or
reads (33.8 MiB), and nothing a model call can reach:

- never code: no `.py` or native module of any layer distribution (tests/unit/test_packaging.py
  checks every file of every one, as installed in the venv, and every module stepwise imports);
- never litellm's offline data: the bundled cost map (LITELLM_LOCAL_MODEL_COST_MAP) and the tiktoken
  and tokenizer files it counts tokens with (KEEP below; the same test checks it);
- and `make package` (VERIFY=1, the default) applies the same rules to an x86_64 copy of the same
  pinned releases and imports every litellm module with and without them (packaging/verify.py).

Add a rule only with a measured size and a reason; a layer-specific rule that no longer matches
anything fails the build (a renamed directory must not silently stop being trimmed).

Standalone on purpose (stdlib only): the unit test loads it by path.
"""

from __future__ import annotations

import fnmatch
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    """Remove `pattern` (relative to a layer's `python/`) from the layers named in `layers`.

    A pattern ending in `/` removes matching directories with everything in them; any other pattern
    removes matching files. `fnmatch` syntax: `*` also matches `/`, so `*.pyi` matches at any depth.
    """

    pattern: str
    layers: tuple[str, ...]
    why: str

    @property
    def is_dir(self) -> bool:
        return self.pattern.endswith("/")

    def matches(self, relpath: str, is_dir: bool) -> bool:
        if is_dir != self.is_dir:
            return False
        return fnmatch.fnmatchcase(relpath + "/" if is_dir else relpath, self.pattern)


ALL = ("core", "model", "stepwise")

RULES: tuple[Rule, ...] = (
    Rule(
        "litellm/proxy/_experimental/out/",
        ("model",),
        "~20 MB: the LiteLLM proxy's admin UI, a static Next.js build served only by proxy_server.py",
    ),
    Rule(
        "litellm/proxy/swagger/",
        ("model",),
        "~1.7 MB: Swagger UI assets the proxy server serves at /docs",
    ),
    Rule(
        "litellm/proxy/_lazy_openapi_snapshot.json",
        ("model",),
        "~2.1 MB: the proxy server's OpenAPI document, read only by litellm/proxy/_lazy_openapi_snapshot.py",
    ),
    Rule("bin/", ALL, "console scripts pip wrote for the build machine's interpreter; Lambda runs none"),
    Rule("*.pyi", ALL, "type stubs: read by type checkers, never by the interpreter"),
)

# Distributions of a layer's closure that are not installed at all, with the reason. The layer's
# requirements file still pins them (the lock and the local venv keep them).
SKIP_DISTS: dict[str, str] = {
    "hf-xet": (
        "~11 MB native library: huggingface_hub's Xet storage backend, used only to download files "
        "from the Hugging Face Hub, which a Lambda with egress to model APIs only never does; "
        "huggingface_hub imports it lazily and treats it as optional"
    ),
}

# Data (relative to python/) the rules must never remove: files a model call reads at run time. Code
# needs no list: tests/unit/test_packaging.py checks that no rule removes any .py or native module.
KEEP: tuple[str, ...] = (
    "litellm/model_prices_and_context_window_backup.json",  # the cost map, read offline
    "litellm/litellm_core_utils/tokenizers/",  # tiktoken encodings and tokenizer JSON, read offline
    "litellm/llms/huggingface/huggingface_llms_metadata/",  # the huggingface provider's model lists
)


@dataclass
class Trimmed:
    layer: str
    removed_bytes: int = 0
    removed_files: int = 0
    by_rule: dict[str, int] = field(default_factory=dict)  # pattern -> bytes removed


def rules_for(layer: str) -> list[Rule]:
    return [rule for rule in RULES if layer in rule.layers]


def removed_by(relpath: str, layer: str, is_dir: bool = False) -> Rule | None:
    """The rule that removes `relpath` (or one of its parent directories) from `layer`, if any."""
    parts = relpath.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        prefix_is_dir = depth < len(parts) or is_dir
        for rule in rules_for(layer):
            if rule.matches(prefix, prefix_is_dir):
                return rule
    return None


def trim(root: Path, layer: str) -> Trimmed:
    """Apply the rules to the tree at `root` (a layer's `python/`, or a copy of one) in place."""
    done = Trimmed(layer, by_rule={rule.pattern: 0 for rule in rules_for(layer)})
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts)):
        if not path.exists() and not path.is_symlink():
            continue  # inside a directory already removed
        relpath = path.relative_to(root).as_posix()
        is_dir = path.is_dir() and not path.is_symlink()
        rule = next((r for r in rules_for(layer) if r.matches(relpath, is_dir)), None)
        if rule is None:
            continue
        files = [p for p in path.rglob("*") if p.is_file()] if is_dir else [path]
        size = sum(p.stat().st_size for p in files)
        shutil.rmtree(path) if is_dir else path.unlink()
        done.removed_bytes += size
        done.removed_files += len(files)
        done.by_rule[rule.pattern] += size
    return done


def unused_rules(results: list[Trimmed]) -> list[str]:
    """Layer-specific rules that removed nothing in any layer: stale, so the build stops."""
    used = {pattern for r in results for pattern, size in r.by_rule.items() if size}
    targeted = [rule for rule in RULES if rule.layers != ALL]
    return [rule.pattern for rule in targeted if rule.pattern not in used]
