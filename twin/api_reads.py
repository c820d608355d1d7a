"""`kubectl get KIND [NAME] -o json`, answered over one kept-alive HTTPS connection instead of a new kubectl.

The tests and the twin's own waits poll the API server thousands of times a run. A kubectl process for each
poll costs its start, a read of the discovery cache, a new TLS connection and, from outside the twin's network
namespace, a new relay through the twin's forwarder (`twin.netns.forward`): together several times the
request itself. Here a read of that one shape is one request on a connection kept per thread, with what
kubectl does for it (kubernetes v1.37 staging/src/k8s.io/kubectl/pkg/cmd/get/get.go, `-o json`):

- KIND resolves as kubectl's RESTMapper resolves it: a resource's plural, singular or short name, or its
  kind, optionally followed by `.group` or `.version.group`; a name several groups serve goes to the first of
  them in discovery's order (the core group first), in the group's preferred version, as kubectl's
  PriorityRESTMapper picks (Kueue serves `clusterqueues` in kueue.x-k8s.io and in its visibility API);
- the resources come from aggregated discovery (`/api`, `/apis`, apidiscovery.k8s.io/v2, GA in 1.30), read
  again when a kind is not found, since CRDs come and go;
- managedFields are left out, as kubectl leaves them out of what it prints unless `--show-managed-fields`;
- a list is read in pages of 500 (`--chunk-size`'s default) and printed as kubectl prints it: a `List` whose
  items carry their `apiVersion` and `kind`;
- the namespace is `-n`'s, else the context's, else `default`; `-A` lists every namespace;
- a team member is impersonated with the same headers kubectl's `--as` and `--as-group` send.

Anything else (other flags, other output, a kubeconfig of another shape) and every answer other than 200 is
left to kubectl itself, so refusals and errors read exactly as kubectl words them. A kubeconfig is read once.

Not the kubernetes client's DynamicClient (the replays' watchers use its typed APIs): its headers are one
value per name, so it cannot send the several `Impersonate-Group` headers a member with two groups needs, and
its discovery reads each group version apart where aggregated discovery is two requests.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PAGE = 500  # kubectl's --chunk-size default
DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@dataclass(frozen=True)
class Resource:
    """One resource of the group's preferred version, as discovery names it."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short: tuple[str, ...] = ()
    preferred: bool = True  # its group's preferred version

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str, name: str) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scope = f"/namespaces/{urllib.parse.quote(namespace)}" if self.namespaced and namespace else ""
        return f"{base}{scope}/{self.plural}" + (f"/{urllib.parse.quote(name)}" if name else "")

    def called(self, word: str) -> bool:
        return word in (self.plural, self.singular, self.kind.lower(), *self.short)


@dataclass(frozen=True)
class Read:
    """The one shape answered here: `get KIND [NAME] -o json [-n NS | -A] [-l SELECTOR] [--ignore-not-found]`."""

    kind: str
    name: str = ""
    namespace: str = ""
    all_namespaces: bool = False
    selector: str = ""


def parse(args: Sequence[str]) -> Read | None:
    """The read `args` ask for, or None when they ask anything else (left to kubectl)."""
    if len(args) < 2 or args[0] != "get":
        return None
    words, flags = list(args[1:]), {}
    positional: list[str] = []
    while words:
        word = words.pop(0)
        if word in ("-o", "-n", "-l", "--namespace", "--selector", "--output") and words:
            flags[word.lstrip("-")[0]] = words.pop(0)
        elif word.startswith(("--namespace=", "--selector=", "--output=", "-o=")):
            key, _, value = word.partition("=")
            flags[key.lstrip("-")[0]] = value
        elif word in ("-A", "--all-namespaces"):
            flags["A"] = "yes"
        elif word == "--ignore-not-found":
            continue  # a read answered here found its object; a 404 goes to kubectl, which honours the flag
        elif word.startswith("-"):
            return None
        else:
            positional.append(word)
    if (
        flags.get("o") != "json"
        or not 1 <= len(positional) <= 2
        or "," in positional[0]
        or "/" in positional[0]
    ):
        return None
    if len(positional) == 2 and ("A" in flags or "l" in flags):
        return None
    return Read(positional[0], positional[1] if len(positional) == 2 else "", flags.get("n", ""),
                "A" in flags, flags.get("l", ""))  # fmt: skip


@dataclass
class Client:
    """One kubeconfig's server and credentials, its discovered resources and a connection per thread."""

    host: str
    port: int
    context: ssl.SSLContext
    namespace: str
    token: str = ""
    resources: list[Resource] = field(default_factory=list)
    local: threading.local = field(default_factory=threading.local)

    def request(self, path: str, headers: dict[str, Any]) -> tuple[int, bytes]:
        """GET `path` on this thread's connection (made again once if the server closed it)."""
        for attempt in range(2):
            connection = getattr(self.local, "connection", None)
            if connection is None or getattr(self.local, "pid", 0) != os.getpid():  # never a forked parent's
                self.local.pid = os.getpid()
                connection = http.client.HTTPSConnection(
                    self.host, self.port, context=self.context, timeout=60
                )
                self.local.connection = connection
            try:
                connection.putrequest("GET", path, skip_accept_encoding=True)
                for key, value in headers.items():
                    for one in value if isinstance(value, tuple) else (value,):
                        connection.putheader(key, one)
                if self.token:
                    connection.putheader("Authorization", f"Bearer {self.token}")
                connection.endheaders()
                reply = connection.getresponse()
                return reply.status, reply.read()
            except (http.client.HTTPException, ConnectionError, ssl.SSLError):
                connection.close()
                self.local.connection = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def discover(self) -> None:
        """Every group's resources in kubectl's order of priority: the groups as discovery lists them (the core
        group first), each group's preferred version before its others."""
        found: list[Resource] = []
        for root in ("/api", "/apis"):
            status, body = self.request(root, {"Accept": DISCOVERY})
            if status != 200:
                raise OSError(f"discovery {root}: {status}")
            for group in json.loads(body).get("items", []):
                name = group.get("metadata", {}).get("name", "")
                for rank, version in enumerate(group.get("versions") or []):  # the preferred version first
                    for r in version.get("resources") or []:
                        kind = (r.get("responseKind") or {}).get("kind", "")
                        found.append(Resource(name, version["version"], r["resource"], r.get("singularResource", ""),
                                              kind, r.get("scope") == "Namespaced", tuple(r.get("shortNames") or ()),
                                              preferred=rank == 0))  # fmt: skip
        self.resources = found  # one assignment: a reader sees the old list or the new one

    def resolve(self, kind: str) -> Resource | None:
        """kubectl's resource for `kind`: the first match in priority order (client-go restmapper
        `NewDiscoveryRESTMapper`, a PriorityRESTMapper). None when none matches, even after discovery is read
        again, or when the first match is a version other than its group's preferred one (left to kubectl)."""
        for fresh in (False, True):
            if fresh or not self.resources:
                self.discover()
            word, _, rest = kind.lower().partition(".")
            matches = [r for r in self.resources if r.called(word)
                       and (not rest or rest in (r.group, f"{r.version}.{r.group}"))]  # fmt: skip
            if matches:
                first = matches[0]
                explicit = rest == f"{first.version}.{first.group}"
                return first if first.preferred or explicit else None
        return None

    def get(self, read: Read, headers: dict[str, Any]) -> str | None:
        """kubectl's `-o json` output for `read`, or None to leave it to kubectl."""
        resource = self.resolve(read.kind)
        if resource is None or (read.all_namespaces and read.name):
            return None
        namespace = "" if read.all_namespaces or not resource.namespaced else read.namespace or self.namespace
        path = resource.path(namespace, read.name)
        if read.name:
            status, body = self.request(path, headers)
            return json.dumps(_printed(json.loads(body)), indent=4) + "\n" if status == 200 else None
        items: list[dict[str, Any]] = []
        query: dict[str, str] = {"limit": str(PAGE)}
        if read.selector:
            query["labelSelector"] = read.selector
        while True:
            status, body = self.request(f"{path}?{urllib.parse.urlencode(query)}", headers)
            if status != 200:
                return None
            page = json.loads(body)
            items += [_printed({"apiVersion": resource.api_version, "kind": resource.kind, **item})
                      for item in page.get("items") or []]  # fmt: skip
            more = (page.get("metadata") or {}).get("continue")
            if not more:
                break
            query["continue"] = more
        listed = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
        return json.dumps(listed, indent=4) + "\n"


def _printed(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as kubectl prints it: without its managedFields."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


_CLIENTS: dict[tuple[Path, int, int], Client | None] = {}
_CLIENTS_LOCK = threading.Lock()


def client(kubeconfig: Path) -> Client | None:
    """The client for `kubeconfig` as it is now (a twin started again in the same folder writes it anew), or
    None when its shape is not the simple one read here (one cluster on https with a CA file, one user with a
    client certificate and key files or a token)."""
    try:
        stat = kubeconfig.stat()
    except OSError:
        return None
    key = (kubeconfig.resolve(), stat.st_ino, stat.st_mtime_ns)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = _client(kubeconfig)
        return _CLIENTS[key]


def _client(kubeconfig: Path) -> Client | None:
    try:
        config = yaml.safe_load(kubeconfig.read_text())
        current = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == current["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == current["user"])
    except (OSError, yaml.YAMLError, KeyError, StopIteration, TypeError):
        return None
    server = urllib.parse.urlsplit(str(cluster.get("server", "")))
    if server.scheme != "https" or not server.hostname or not cluster.get("certificate-authority"):
        return None
    if set(user) not in ({"client-certificate", "client-key"}, {"token"}):
        return None
    try:
        context = ssl.create_default_context(cafile=str(cluster["certificate-authority"]))
        if "client-certificate" in user:
            context.load_cert_chain(str(user["client-certificate"]), str(user["client-key"]))
    except (OSError, ssl.SSLError):
        return None
    return Client(server.hostname, server.port or 443, context, str(current.get("namespace") or "default"),
                  token=str(user.get("token", "")))  # fmt: skip


def read(kubeconfig: Path, args: Sequence[str], user: str = "", groups: Sequence[str] = ()) -> str | None:
    """kubectl's output for `args` when they are the read answered here and it succeeds; None otherwise."""
    asked = parse(args)
    if asked is None:
        return None
    found = client(kubeconfig)
    if found is None:
        return None
    headers: dict[str, Any] = {"Accept": "application/json"}
    if user:
        headers["Impersonate-User"] = user
        if groups:
            headers["Impersonate-Group"] = tuple(groups)
    try:
        return found.get(asked, headers)
    except (OSError, http.client.HTTPException, ValueError):
        return None
