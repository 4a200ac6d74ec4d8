"""The release's CycloneDX SBOM (JSON, spec 1.6), made with cyclonedx-python-lib.

The image is the BOM's subject (`metadata.component`, a container). Its components: the base
image (a container) and the Triton server it carries (an application); each model (a
machine-learning-model, its versions in a property); every distribution of every model's own
environment (a library with its pypi purl and, where known, the sha256 of its wheel), on which
the models using it depend; and the Python packages the image's own Python has (libraries,
their location in a property).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from triton_release import __version__
from triton_release.contract import digest_hex

SUBJECT_REF = "image"  # the bom-ref of the image, the subject


@dataclass(frozen=True, order=True)
class Package:
    name: str
    version: str
    sha256: str = ""  # of its wheel, when known
    location: str = ""  # where it is installed in the image
    sha256_prefix: str = ""  # the first hex of the wheel's sha256, when only that is known (its folder's name)


def sbom(*, image: str, digest: str, version: str, **given: Any) -> dict:
    """The CycloneDX document (as JSON data) of the image `image`@`digest`, release `version`:
    `contents(**given)`, named."""
    return with_subject(contents(**given), image=image, digest=digest, version=version)


def _subject(image: str, digest: str, version: str) -> Any:
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.component import Component, ComponentType

    return Component(
        name=image,
        version=version or digest,
        type=ComponentType.CONTAINER,
        bom_ref=SUBJECT_REF,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest_hex(digest))] if digest else [],
        properties=[Property(name="triton-release:digest", value=digest)] if digest else [],
    )


def with_subject(document: dict, *, image: str, digest: str, version: str) -> dict:
    """`document` (from `contents`) about the image `image`@`digest`, release `version`: its
    `metadata.component`, written by the library on its own, is the only place that names them."""
    from cyclonedx.model.bom import Bom
    from cyclonedx.output.json import JsonV1Dot6

    alone = Bom()
    alone.metadata.component = _subject(image, digest, version)
    component = json.loads(JsonV1Dot6(alone).output_as_string())["metadata"]["component"]
    return {**document, "metadata": {**document["metadata"], "component": component}}


def contents(
    *,
    base_image: str,
    base_image_id: str,
    triton: str,
    models: Mapping[str, list[int]],
    environments: Mapping[str, Iterable[Package]],
    system: Iterable[Package],
    python: str = "",
) -> dict:
    """The CycloneDX document of an image not yet named: everything but its subject, which only
    `with_subject` fills in (a release knows its digest only once pushed; the contents can be
    written before, beside its golden cases)."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.dependency import Dependable, Dependency
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    bom = Bom()
    subject = _subject("(named by with_subject)", "", "")
    bom.metadata.component = subject
    bom.metadata.tools.components.add(
        Component(name="triton-release", version=__version__, type=ComponentType.APPLICATION)
    )
    base = Component(name=base_image, version=base_image_id, type=ComponentType.CONTAINER, bom_ref="base-image")
    server = Component(
        name="tritonserver",
        version=triton or "unknown",
        type=ComponentType.APPLICATION,
        bom_ref="tritonserver",
        supplier=None,
    )
    bom.components.add(base)
    bom.components.add(server)
    top = [base, server]

    libraries: dict[tuple, Component] = {}
    # the dependency graph, as Bom.register_dependency makes it (each target and each component it
    # depends on, once) without its scan of the graph for every component: a thousand models took
    # a second there
    graph: dict[str, tuple[Component, list[Component]]] = {}

    def depend(target: Component, on: list[Component]) -> None:
        graph.setdefault(str(target.bom_ref), (target, []))[1].extend(on)
        for component in on:
            graph.setdefault(str(component.bom_ref), (component, []))

    def library(package: Package, ref: str, properties: list) -> Component:
        key = (ref, package.name, package.version, package.sha256 or package.sha256_prefix)
        if key not in libraries:
            hashes = [HashType(alg=HashAlgorithm.SHA_256, content=package.sha256)] if package.sha256 else []
            extra = (
                [Property(name="triton-release:wheel-sha256-prefix", value=package.sha256_prefix)]
                if package.sha256_prefix and not package.sha256
                else []
            )
            component = Component(
                name=package.name,
                version=package.version,
                type=ComponentType.LIBRARY,
                purl=PackageURL(type="pypi", name=package.name, version=package.version),
                hashes=hashes,
                properties=properties + extra,
                bom_ref=f"{ref}:{package.name}@{package.version}"
                f"{'#' + (package.sha256 or package.sha256_prefix)[:12] if package.sha256 or package.sha256_prefix else ''}",
            )
            libraries[key] = component
            bom.components.add(component)
        return libraries[key]

    for name, versions in sorted(models.items()):
        model = Component(
            name=name,
            version=str(max(versions)) if versions else "",
            bom_ref=f"model:{name}",
            type=ComponentType.MACHINE_LEARNING_MODEL,
            properties=[Property(name="triton-release:versions", value=",".join(map(str, versions)))],
        )
        bom.components.add(model)
        top.append(model)
        used = [
            library(
                p,
                "environment",
                [Property(name="triton-release:installed-in", value="model environments (EXECUTION_ENV_PATH)")],
            )
            for p in sorted(environments.get(name, ()))
        ]
        if used:
            model.properties.add(Property(name="triton-release:environment", value=f"/opt/triton-release/envs/{name}"))
            depend(model, used)
    image_python = [
        library(
            p,
            "image",
            [
                Property(name="triton-release:installed-in", value=f"the image's Python {python}".rstrip()),
                Property(name="triton-release:location", value=p.location),
            ],
        )
        for p in sorted(set(system))
    ]
    depend(base, image_python)
    depend(subject, top)
    bom.dependencies.update(
        Dependency(ref=target.bom_ref, dependencies=[Dependency(ref=c.bom_ref) for c in on])
        for target, on in graph.values()
    )
    # The writer's validate() registers every component once more, each by a scan of the whole
    # graph; every component is in it already, so only one that is not goes to the library's own.
    registered = {str(dependency.ref) for dependency in bom.dependencies}
    own = bom.register_dependency

    def register(target: Dependable, depends_on: Iterable[Dependable] | None = None) -> None:
        if depends_on or str(target.bom_ref) not in registered:
            own(target, depends_on)
            registered.add(str(target.bom_ref))

    bom.register_dependency = register  # type: ignore[method-assign]
    return json.loads(JsonV1Dot6(bom).output_as_string())


def listed_packages(document: dict) -> set[tuple[str, str]]:
    """(name, version) of every library an SBOM made here lists."""
    return {(c.get("name"), c.get("version")) for c in document.get("components", []) if c.get("type") == "library"}


# -- written in a process of its own -----------------------------------------------------------
# At a thousand models the library takes about 0.4 s of CPU to write the contents: a release has
# them written by `python -P -m triton_release.evidence.sbom` (evidence/attach.py's SbomBeside) on
# a core the build and the tests leave idle (a thread would take the interpreter from them as long).


def contents_arguments(**arguments: Any) -> bytes:
    """`contents`' keyword arguments as the process below reads them on its stdin."""
    listed = {
        **arguments,
        "environments": {m: [asdict(p) for p in ps] for m, ps in arguments["environments"].items()},
        "system": [asdict(p) for p in arguments["system"]],
    }
    return json.dumps(listed).encode()


def _main() -> None:
    given = json.loads(sys.stdin.buffer.read())
    given["environments"] = {m: [Package(**p) for p in ps] for m, ps in given["environments"].items()}
    given["system"] = [Package(**p) for p in given["system"]]
    sys.stdout.buffer.write(json.dumps(contents(**given)).encode())


if __name__ == "__main__":
    _main()
