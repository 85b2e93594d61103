"""Building each variant a release delivers, and sizing it against its delivery's limits.

Each variant is an ordinary `etdeploy build` (etdeploy.builder.build: cached by content,
so an unchanged spec builds nothing). Sizes are etdeploy.sizecheck's: the download size
Play measures (bundletool's gzip estimate), the raw size Apple measures, both cached by
digest, judged against the stores' limits table (etdeploy/sizecheck/limits.py) with the
spec's [release.limits] over it.

A variant whose backend cannot lower on this machine (QNN without its SDK, MPS off a
Mac) is a UsageError, or with `skip_unavailable` a variant "not built" with the reason:
never dropped without a word.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.builder import BuildOptions, build
from etdeploy.builder.backends import get_backend
from etdeploy.errors import UsageError
from etdeploy.pipeline.llm.folder import looks_like_lm_folder, open_lm_folder
from etdeploy.pipeline.llm.lm_export import LmBuildOptions, build_lm, check_options
from etdeploy.release.spec import ReleaseSpec, Variant
from etdeploy.sizecheck.check import SizeReport, check_size
from etdeploy.sizecheck.limits import Limit, apply_overrides, default_limits

if TYPE_CHECKING:
    from etdeploy.builder.manifest import BuildManifest

Status = Callable[[str], None]
PER_PACK = "play.ai-pack"  # judged on the pack alone; the others with spec.app_bytes added


@dataclass(frozen=True)
class BuiltVariant:
    """A variant as built (its cached files), or why it was not."""

    variant: Variant
    pte: Path | None = None
    data: Path | None = None  # its external weights (.ptd), when it has them
    manifest: BuildManifest | None = None
    cached: bool = False
    not_built: str | None = None
    play_size: SizeReport | None = None
    apple_size: SizeReport | None = None
    # A language model's program has no build manifest (etdeploy.pipeline.llm): its digest.
    lm_sha256: str | None = None

    @property
    def built(self) -> bool:
        return self.pte is not None

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.pte, self.data) if p is not None)

    @property
    def sha256(self) -> str:
        if self.manifest is not None:
            return self.manifest.sha256
        return self.lm_sha256 or ""

    def digests(self) -> dict[Path, str]:
        manifest = self.manifest
        if manifest is None:
            return {self.pte: self.lm_sha256} if self.pte and self.lm_sha256 else {}
        out = {self.pte: manifest.sha256} if self.pte is not None else {}
        if self.data is not None and manifest.data is not None:
            out[self.data] = manifest.data.sha256
        return out


def unavailable(variant: Variant) -> str | None:
    """Why this machine cannot build `variant`'s backend, or None."""
    try:
        get_backend(variant.backend)
    except UsageError as exc:  # the spec checked the name: only "cannot lower here" is left
        return exc.message
    return None


def build_variant(
    spec: ReleaseSpec, variant: Variant, use_cache: bool, say: Status
) -> BuiltVariant:
    if looks_like_lm_folder(spec.model):
        return _build_lm_variant(spec, variant, use_cache, say)

    # The variant's options as they are (a Variant is BuildOptions and its name), the
    # cache as `release build` was asked.
    chosen = {f.name: getattr(variant, f.name) for f in fields(BuildOptions)}
    options = BuildOptions(**{**chosen, "use_cache": use_cache})
    result = build(spec.model, options, status=lambda s: say(f"{variant.name}: {s}"))
    return BuiltVariant(variant, result.pte, result.data, result.manifest, bool(result.cached))


def _build_lm_variant(
    spec: ReleaseSpec, variant: Variant, use_cache: bool, say: Status
) -> BuiltVariant:
    """A language model's folder built as `etdeploy run FOLDER` builds it (static KV
    cache at the variant's max_seq_len, 8da4w or float: etdeploy.pipeline.llm)."""
    if variant.backend != "xnnpack":
        raise UsageError(
            f"{spec.path.name}: variant {variant.name}: a language model builds for xnnpack "
            f"only, not {variant.backend}",
            'write backend = "xnnpack" (or leave it out)',
        )
    folder = open_lm_folder(Path(spec.model))
    options = LmBuildOptions(
        max_seq_len=variant.max_seq_len, quantize=variant.quantize,
        group_size=variant.group_size, quantize_embeddings=variant.quantize_embeddings,
    )  # fmt: skip
    try:
        check_options(folder, options)
    except UsageError as exc:
        raise UsageError(
            f"{spec.path.name}: variant {variant.name}: {exc.message}", exc.hint
        ) from None
    say(f"{variant.name}: building {folder.path.name} ({options.label})")
    program = build_lm(folder, options, use_cache=use_cache)
    return BuiltVariant(variant, program.pte, cached=program.cached, lm_sha256=program.sha256)


def limits_table(spec: ReleaseSpec) -> dict[str, Limit]:
    try:
        return apply_overrides(default_limits(), spec.limits)
    except UsageError as exc:
        raise UsageError(f"{spec.path.name}: release.{exc.message}", exc.hint) from None


def size_variant(spec: ReleaseSpec, built: BuiltVariant, table: dict[str, Limit]) -> BuiltVariant:
    """`built` with its size against the limits of its Play delivery (the AI pack of its
    mode, plus spec.app_bytes for the rest of the app) and, when the Apple section delivers
    it, of its Apple delivery. Over a limit is a UsageError: the release cannot ship so."""
    from dataclasses import replace

    play_groups = {g.variant for g in spec.groups} | {spec.fallback}
    play = apple = None
    if built.variant.name in play_groups:
        # The pack alone against the per-pack limit; with the rest of the app against the
        # cumulative ones (the measurements are cached: the second check deflates nothing).
        def sized(extra: int) -> SizeReport:
            return check_size(
                built.files, store="play", deliveries=[f"ai-pack-{spec.delivery}"],
                extra_bytes=extra, limits=table, any_file=True, digests=built.digests(),
            )  # fmt: skip

        alone, with_app = sized(0), sized(spec.app_bytes)
        verdicts = [v for v in alone.verdicts if v.limit.key == PER_PACK] + [
            v for v in with_app.verdicts if v.limit.key != PER_PACK
        ]
        play = replace(with_app, verdicts=tuple(verdicts))
        _refuse_over(spec, built, play, f"Play AI pack ({spec.delivery})")
    if spec.apple is not None and built.variant.name in spec.apple.variants:
        deliveries = ["odr"] if spec.apple.delivery == "odr" else []
        if deliveries:
            apple = check_size(built.files, store="appstore", deliveries=deliveries, limits=table,
                               any_file=True, digests=built.digests())  # fmt: skip
            _refuse_over(spec, built, apple, "On-Demand Resources asset pack")
    return replace(built, play_size=play, apple_size=apple)


def size_apple_total(
    spec: ReleaseSpec, built: list[BuiltVariant], table: dict[str, Limit]
) -> SizeReport | None:
    """All the Apple packs together against the hosting total of their delivery."""
    if spec.apple is None:
        return None
    files = [f for b in built if b.built and b.variant.name in spec.apple.variants for f in b.files]
    if not files:
        return None
    delivery = "odr-hosted" if spec.apple.delivery == "odr" else "background-assets"
    digests = {p: d for b in built for p, d in b.digests().items()}
    report = check_size(files, store="appstore", deliveries=[delivery], limits=table,
                        any_file=True, digests=digests)  # fmt: skip
    over = [v for v in report.verdicts if v.status == "over"]
    if over:
        raise UsageError(
            f"{spec.path.name}: the Apple asset packs together are over "
            f"{over[0].limit.label}: {over[0].describe()}",
            "deliver fewer or smaller variants to Apple devices",
        )
    return report


def _refuse_over(spec: ReleaseSpec, built: BuiltVariant, report: SizeReport, what: str) -> None:
    over = [v for v in report.verdicts if v.status == "over"]
    if not over:
        return
    verdict = over[0]
    raise UsageError(
        f"{spec.path.name}: variant {built.variant.name} is over its delivery's limit "
        f"({what}): {verdict.limit.label} {verdict.describe()}",
        'make it smaller (quantize = "int8"), deliver it otherwise (release.delivery), or, if '
        "the store's figure has changed, set it in [release.limits]",
    )


def build_variants(
    spec: ReleaseSpec, *, skip_unavailable: bool, use_cache: bool, say: Status
) -> list[BuiltVariant]:
    """Every variant the spec delivers: built (or not, with why), then sized."""
    out: list[BuiltVariant] = []
    for name in spec.used_variants:
        variant = spec.variant(name)
        why = unavailable(variant)
        if why is not None:
            if not skip_unavailable:
                raise UsageError(
                    f"{spec.path.name}: variant {name} cannot be built here: {why}",
                    "build on a machine that has it, or pass --skip-unavailable to list it as "
                    "not built (its groups' devices then get the next group or the fallback)",
                )
            out.append(BuiltVariant(variant, not_built=why))
            continue
        say(f"building variant {name} ({variant.label})")
        out.append(build_variant(spec, variant, use_cache, say))
    table = limits_table(spec)
    sized = [size_variant(spec, b, table) if b.built else b for b in out]
    size_apple_total(spec, sized, table)
    return sized
