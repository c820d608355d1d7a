"""The twin's toolchain: find the pinned component binaries, or build them from their Go modules.

Every component is pinned in the versions recipe (`infra.versions`, `TWIN_*`) and built by a small wrapper
module in a folder beside this file (`twin/toolchain/<wrapper>/`: a go.mod that requires the upstream module at that version and, where the
upstream go.mod has `replace` lines that `go install pkg@version` refuses, repeats them; golang/go#44840). No
upstream code is copied into the repository. Builds land in a cache outside the clone, one folder per
component and version (`<cache>/<name>-<version>/`, envtest's layout, so anything honouring
`KUBEBUILDER_ASSETS` can use the Kubernetes folder), and are reused; a build is written to a scratch folder and
renamed into place, so a half-built folder never counts.

Where binaries come from, first match wins: `GPUFLEET_TWIN_BIN` (a folder holding the programs by name, used as
they are), the cache, then `PATH`. Data files a component needs at run time (Kueue's chart and CRDs, kwok's
stages) are read from the component's own Go module zip, copied beside the binaries at build time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.errors import ToolMissing
from infra.versions import (
    TWIN_ALERTMANAGER,
    TWIN_ETCD,
    TWIN_HELM,
    TWIN_JOBSET_CRDS,
    TWIN_KARPENTER_CRDS,
    TWIN_KARPENTER_KWOK,
    TWIN_KUBE_STATE_METRICS,
    TWIN_KUBERAY_CRDS,
    TWIN_KUEUE,
    TWIN_KWOK,
    TWIN_MINORS,
    TWIN_PROMETHEUS,
    TWIN_PROMETHEUS_OPERATOR,
    TWIN_PROVISIONING_CRD,
    TWIN_PULUMI,
    TWIN_PULUMI_KUBERNETES,
    TWIN_TRAINING_OPERATOR_CRDS,
    GoBuild,
    twin_kubernetes,
)

# One Go wrapper module per component, in a folder beside this file.
WRAPPERS = Path(__file__).resolve().parent
BIN_ENV = "GPUFLEET_TWIN_BIN"
CACHE_ENV = "GPUFLEET_TWIN_CACHE"
RECORD = "BUILD.json"  # what a finished build writes: seconds, bytes, Go version
BUILD_HINT = (
    "build them with `invoke twin-build` (Go >= 1.26 and the Go module proxy; about 40-55 minutes cold on 2 "
    "cores, benchmarks/twin_toolchain.md) "
    f"or set {BIN_ENV} to a folder holding them"
)
# Files each component needs at run time, from its module zip: (path in the module, name in the cache folder).
DATA: dict[str, tuple[tuple[str, str], ...]] = {
    "kueue": (("charts/kueue", "chart"), ("config/components/crd/bases", "crds")),
    "kwok": (("kustomize/stage", "stages"),),
    "prometheus-operator": (("example/prometheus-operator-crd", "monitoring-crds"),),
    "karpenter-crds": (("pkg/apis/crds", "karpenter-crds"),),
    "karpenter-kwok": (("kwok/apis/crds", "karpenter-kwok-crds"),),
    "training-operator-crds": (("manifests/base/crds", "training-crds"),),
    "kuberay-crds": (("config/crd/bases", "kuberay-crds"),),
    "jobset-crds": (("config/components/crd/bases", "jobset-crds"),),
    "provisioningrequest-crd": (("config/crd", "provisioning-crds"),),
}
Say = Callable[[str], None]


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpufleet" / "twin"


def components(minors: Iterable[str] = TWIN_MINORS) -> list[GoBuild]:
    """Every component the twin runs, with one control plane per Kubernetes minor."""
    return [
        TWIN_ETCD,
        *(twin_kubernetes(m) for m in minors),
        TWIN_KWOK,
        TWIN_KUEUE,
        TWIN_HELM,
        TWIN_PULUMI,
        TWIN_PULUMI_KUBERNETES,
        TWIN_PROMETHEUS_OPERATOR,
        TWIN_PROMETHEUS,
        TWIN_ALERTMANAGER,
        TWIN_KUBE_STATE_METRICS,
        TWIN_KARPENTER_CRDS,
        TWIN_KARPENTER_KWOK,
        TWIN_TRAINING_OPERATOR_CRDS,
        TWIN_KUBERAY_CRDS,
        TWIN_JOBSET_CRDS,
        TWIN_PROVISIONING_CRD,
    ]


def folder(component: GoBuild) -> Path:
    return cache_root() / f"{component.name}-{component.version}"


def is_built(component: GoBuild) -> bool:
    return (folder(component) / RECORD).is_file()


def go_env() -> dict[str, str]:
    """The build environment: the machine's own Go only (never a downloaded toolchain), static binaries."""
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
    return env


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolMissing(f"the twin's toolchain is not built and Go is not installed: {BUILD_HINT}")
    return go


def _run(argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        list(argv), cwd=cwd, env=env or go_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise ToolMissing(f"`{' '.join(argv)}` failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def module_dir(module: str, version: str) -> Path:
    """The extracted module zip in the Go module cache (downloaded from the proxy if missing)."""
    out = _run([_go(), "mod", "download", "-json", f"{module}@{version}"], cwd=WRAPPERS)
    return Path(json.loads(out)["Dir"])


def _version_ldflags(c: GoBuild) -> list[str]:
    """-X flags that stamp the version where upstream's release build does (or clients would see 0.0)."""
    if c.name == "kubernetes":
        major, minor = c.version.removeprefix("v").split(".")[:2]
        fields = {
            "gitVersion": c.version,
            "gitMajor": major,
            "gitMinor": minor,
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
        }
        return [
            f"-X {pkg}.{k}={v}"
            for k, v in fields.items()
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        ]
    return {
        "kueue": [f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={c.version}"],
        "pulumi": [f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={c.version}"],
        "helm": [f"-X helm.sh/helm/v3/internal/version.version={c.version}"],
        "prometheus-operator": [
            f"-X github.com/prometheus/common/version.Version={c.version.removeprefix('v')}",
        ],
        # Prometheus and Alertmanager stamp their version where their promu release build does (.promu.yml).
        "prometheus": [f"-X github.com/prometheus/common/version.Version={c.note.removeprefix('v')}"],
        "alertmanager": [f"-X github.com/prometheus/common/version.Version={c.version.removeprefix('v')}"],
        "kube-state-metrics": [f"-X github.com/prometheus/common/version.Version={c.version}"],
        "pulumi-kubernetes": [
            f"-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version={c.version}"
        ],
    }.get(c.name, [])


def _tags(c: GoBuild) -> list[str]:
    # Kueue: the scheduler-library code serves only the alpha, default-off SchedulerLibraryIntegration gate
    # (pkg/features/kube_features.go) and has its own stub for this tag. Pulumi: its release tags (.goreleaser.yml).
    tags = {"kueue": "exclude_scheduler_library", "pulumi": "osusergo,grpcnotrace"}.get(c.name)
    return ["-tags", tags] if tags else []


def _build_wrapper(c: GoBuild, out: Path) -> None:
    ldflags = " ".join(["-s", "-w", *_version_ldflags(c)])
    env = {**go_env(), "GOBIN": str(out)}
    _run([_go(), "install", "-trimpath", *_tags(c), "-ldflags", ldflags, "tool"], WRAPPERS / c.wrapper, env)
    built = {p.name for p in out.iterdir()}
    # Go names a binary after its package path's last element: server (etcd's /v3), operator.
    renames = {
        "etcd": ("server", "etcd"),
        "prometheus-operator": ("operator", "prometheus-operator"),
        "karpenter-kwok": ("kwok", "karpenter-kwok"),
    }
    if c.name in renames and renames[c.name][0] in built:
        (out / renames[c.name][0]).rename(out / renames[c.name][1])


def _build_pulumi_kubernetes(c: GoBuild, out: Path, scratch: Path) -> None:
    """The provider's main package embeds schema-embed.json, which upstream generates (`go generate`) and does
    not commit, so the module zip cannot be built as it is (pulumi-kubernetes .gitignore, cmd/.../main.go).
    Build a writable copy: its local `sdk/v4 => ../sdk` replace pointed at the SDK module of the same release,
    upstream's generate.go run with VERSION set, then the provider built (Makefile's `provider` target)."""
    src = scratch / "provider"
    shutil.copytree(module_dir(c.module, c.note), src)
    for path in [src, *src.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    sdk = "github.com/pulumi/pulumi-kubernetes/sdk/v4"
    _run([_go(), "mod", "edit", f"-replace={sdk}={sdk}@v{c.version}"], src)
    cmd = src / "cmd" / "pulumi-resource-kubernetes"
    _run([_go(), "run", "generate.go"], cmd, {**go_env(), "VERSION": c.version})
    ldflags = " ".join(["-s", "-w", *_version_ldflags(c)])
    target = out / "pulumi-resource-kubernetes"
    _run(
        [
            _go(),
            "build",
            "-trimpath",
            "-ldflags",
            ldflags,
            "-o",
            str(target),
            "./cmd/pulumi-resource-kubernetes",
        ],
        src,
    )


def _build_alertmanager(c: GoBuild, out: Path, scratch: Path) -> None:
    """Alertmanager's web UI is embedded from `ui/app/dist` (ui/web.go, `//go:embed app/dist`), which upstream
    builds with npm (`make assets`) and does not ship in the module zip, so `go install` of the module fails
    ("pattern app/dist: no matching files found"). The twin needs the API only: build a writable copy with a
    one-page placeholder UI, as the module's own go.mod (no replace lines) resolves it."""
    src = scratch / "alertmanager"
    shutil.copytree(module_dir(c.module, c.version), src)
    for path in [src, *src.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    dist = src / "ui" / "app" / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "index.html").write_text("<!doctype html><title>Alertmanager</title>API only (gpufleet twin)\n")
    ldflags = " ".join(["-s", "-w", *_version_ldflags(c)])
    _run([_go(), "build", "-trimpath", "-ldflags", ldflags, "-o", str(out / "alertmanager"),
          "./cmd/alertmanager"], src)  # fmt: skip


def _copy_data(c: GoBuild, out: Path) -> None:
    if c.name not in DATA:
        return
    source = module_dir(c.module, c.version)
    for inside, name in DATA[c.name]:
        shutil.copytree(source / inside, out / "data" / name)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(c: GoBuild, say: Say = print) -> Path:
    """Build one component into its cache folder (scratch folder, then rename); returns the folder."""
    final = folder(c)
    if is_built(c):
        return final
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    out = root / f".{final.name}.partial"
    scratch = root / f".{final.name}.scratch"
    for leftover in (out, scratch):
        shutil.rmtree(leftover, ignore_errors=True)
    out.mkdir()
    scratch.mkdir()
    say(f"building {c.name} {c.version} ...")
    start = time.monotonic()
    try:
        if c.name == "pulumi-kubernetes":
            _build_pulumi_kubernetes(c, out, scratch)
        elif c.name == "alertmanager":
            _build_alertmanager(c, out, scratch)
        elif c.programs:  # a component without programs is data only
            _build_wrapper(c, out)
        _copy_data(c, out)
        missing = [p for p in c.programs if not (out / p).is_file()]
        if missing:
            raise ToolMissing(f"building {c.name} {c.version} produced no {', '.join(missing)}")
        seconds = round(time.monotonic() - start, 1)
        go_version = _run([_go(), "env", "GOVERSION"]).strip()
        record = {"version": c.version, "seconds": seconds, "bytes": _size(out), "go": go_version}
        (out / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        out.rename(final)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"built {c.name} {c.version} in {seconds:.0f} s")
    return final


def build_all(minors: Iterable[str] = TWIN_MINORS, say: Say = print) -> list[GoBuild]:
    """Build every missing component; returns those it built."""
    todo = [c for c in components(minors) if not is_built(c)]
    for c in todo:
        build(c, say)
    return todo


# ---- finding what to run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    """Where each program and data folder of one twin (one Kubernetes minor) is."""

    programs: dict[str, Path]
    data: dict[str, Path]  # "chart", "crds" (Kueue), "stages" (kwok)

    def __getitem__(self, program: str) -> Path:
        return self.programs[program]


def version_probe(c: GoBuild, program: str) -> tuple[list[str], str]:
    """How `program` of `c` tells its version: the arguments to run it with and the text its output must hold
    at the pin. An empty argument list means the program has no version flag (Kueue, the Pulumi provider): its
    Go build info is read instead, and must name the module and version given as "module version" (for the
    provider, built from its module zip as `(devel)`, the SDK module of its release that it is built with)."""
    bare = c.version.removeprefix("v")
    if c.name == "kubernetes":
        if program == "kubectl":
            return ["version", "--client"], f"Client Version: {c.version}"
        return ["--version"], f"Kubernetes {c.version}"
    probes = {
        "etcd": (["--version"], f"etcd Version: {bare}"),
        "kwok": (["--version"], f"kwok version {c.version}"),
        "helm": (["version", "--short"], c.version),
        "pulumi": (["version"], c.version),
        "prometheus-operator": (["--version"], f"version {bare}"),
        "prometheus": (["--version"], f"version {c.note.removeprefix('v')}"),
        "alertmanager": (["--version"], f"version {bare}"),
        "kube-state-metrics": (["version"], f"version {c.version}"),
        "pulumi-kubernetes": ([], f"github.com/pulumi/pulumi-kubernetes/sdk/v4 v{bare}"),
    }
    return probes.get(c.name, ([], f"{c.module} {c.version}"))


def go_build_info(path: Path) -> str:
    """The module lines Go embeds in a binary (what `go version -m` prints), read without Go: the
    `\xff Go buildinf:` header, then, for Go >= 1.18's inline form, two length-prefixed strings (the Go
    version and the module info); "" when there is none (src/debug/buildinfo/buildinfo.go)."""
    import mmap

    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(b"\xff Go buildinf:")
        if at < 0 or not data[at + 15] & 2:  # flag 2: strings inline after the 32-byte header
            return ""
        pos, strings = at + 32, []
        for _ in range(2):
            length = shift = 0
            while True:
                byte = data[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            strings.append(data[pos : pos + length].decode(errors="replace"))
            pos += length
    return strings[1]


def version_problem(c: GoBuild, program: str, path: Path) -> str | None:
    """None when the binary at `path` is the pinned release; otherwise one line saying what it is instead."""
    argv, expected = version_probe(c, program)
    if not argv:
        module, version = expected.split()
        info = go_build_info(path)
        if re.search(rf"^(?:mod|dep|=>)\t{re.escape(module)}\t{re.escape(version)}(\t|$)", info, re.M):
            return None
        found = re.findall(rf"^(?:mod|dep|=>)\t{re.escape(module)}\t(\S+)", info, re.M)
        said = f"module {module} {' => '.join(found)}" if found else f"no Go build info naming {module}"
        return f"{path} is not {c.name} {c.version} ({said})"
    try:
        done = subprocess.run([str(path), *argv], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} did not say its version ({exc})"
    output = done.stdout + done.stderr
    if expected in output:
        return None
    said = (output.strip().splitlines() or ["nothing"])[0]
    return f"{path} is not {c.name} {c.version} (`{program} {' '.join(argv)}`: {said!r})"


def find_program(c: GoBuild, program: str) -> Path | None:
    """GPUFLEET_TWIN_BIN, the cache, then PATH; a binary the toolchain did not build itself is used only when it
    is the pinned release (ToolMissing naming it otherwise: a different release would run under the pin's
    name). None when no candidate exists."""
    path, problem = _search(c, program)
    if problem:
        raise ToolMissing(f"{problem}: {BUILD_HINT}")
    return path


def _search(c: GoBuild, program: str) -> tuple[Path | None, str]:
    """The first usable candidate, or None and what was wrong with the one found ("" when none was)."""
    usable = [p for p in _candidates(c, program) if p.is_file() and os.access(p, os.X_OK)]
    if not usable:
        return None, ""
    path = usable[0]
    if path.parent == folder(c):
        return path, ""
    problem = version_problem(c, program, path)
    return (None, problem) if problem else (path, "")


def _candidates(c: GoBuild, program: str) -> list[Path]:
    supplied = os.environ.get(BIN_ENV)
    candidates = [Path(supplied) / program] if supplied else []
    candidates.append(folder(c) / program)
    on_path = shutil.which(program)
    if on_path:
        candidates.append(Path(on_path))
    return candidates


def program(c: GoBuild, name: str) -> Path | None:
    """Where one program of a component is (GPUFLEET_TWIN_BIN, the twin cache, then PATH, at the pinned release
    only), or None: for tests that run a single tool of the toolchain (promtool, prometheus) without locating a
    whole twin."""
    try:
        return find_program(c, name)
    except ToolMissing:
        return None


def _data(c: GoBuild, say: Say) -> dict[str, Path]:
    wanted = DATA.get(c.name, ())
    here = folder(c) / "data"
    if all((here / name).is_dir() for _, name in wanted):
        return {name: here / name for _, name in wanted}
    say(f"reading {c.name} {c.version}'s data files from its Go module")
    source = module_dir(c.module, c.version)
    return {name: source / inside for inside, name in wanted}


# Components whose programs only `--monitoring` runs (their data, e.g. the operator's CRDs, every twin serves).
MONITORING = ("prometheus-operator", "prometheus", "alertmanager", "kube-state-metrics")
# Components only a Karpenter stack's twin runs (programs and data).
KARPENTER = ("karpenter-kwok",)


def locate(minor: str, say: Say = print, *, monitoring: bool = False, karpenter: bool = False) -> Toolchain:
    """The programs a twin at this Kubernetes minor runs (the monitoring chain's only with `monitoring`,
    Karpenter only with `karpenter`), and the data files every twin serves; ToolMissing (exit 3) names what is
    missing or not the pinned release."""
    programs: dict[str, Path] = {}
    missing: list[str] = []
    wrong: list[str] = []
    needed = [c for c in components([minor]) if karpenter or c.name not in KARPENTER]
    for c in needed:
        if c.name in MONITORING and not monitoring:
            continue
        for program in c.programs:
            path, problem = _search(c, program)
            if path is not None:
                programs[program] = path
            else:
                missing.append(f"{program} ({c.name} {c.version})")
                wrong += [problem] if problem else []
    if missing:
        found = f"; found instead: {'; '.join(wrong)}" if wrong else ""
        raise ToolMissing(f"the twin needs {', '.join(missing)}{found}: {BUILD_HINT}")
    data: dict[str, Path] = {}
    for c in needed:
        data.update(_data(c, say))
    return Toolchain(programs, data)


def build_records(minors: Iterable[str] = TWIN_MINORS) -> dict[str, dict[str, object]]:
    """What each cached build recorded (seconds, bytes), by `<name>-<version>`."""
    out: dict[str, dict[str, object]] = {}
    for c in components(minors):
        record = folder(c) / RECORD
        if record.is_file():
            out[f"{c.name}-{c.version}"] = json.loads(record.read_text())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m twin.toolchain.build [MINOR ...]`: build what is missing (what `invoke twin-build` runs)."""
    minors = list(argv or []) or list(TWIN_MINORS)
    build_all(minors)
    for key, record in build_records(minors).items():
        print(f"{key}: {record['seconds']} s, {int(record['bytes']) // 2**20} MiB")  # type: ignore[call-overload]
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
