"""Every public API function says what it is for: the names ``zoo`` exports and their public
methods, and the family contract and registry a plugin author reads (``help(zoo.train)``)."""

from __future__ import annotations

import inspect

import zoo
import zoo.family
import zoo.registry


def members(owner) -> list[tuple[str, object]]:
    return [(n, v) for n, v in vars(owner).items() if not n.startswith("_")]


def function_of(value) -> object | None:
    value = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    return value if inspect.isfunction(value) else None


def public_api() -> dict[str, object]:
    found: dict[str, object] = {}
    exported = [(f"zoo.{name}", getattr(zoo, name)) for name in zoo.__all__]
    modules = [zoo.family, zoo.registry]
    own = [
        (f"{m.__name__}.{n}", v)
        for m in modules
        for n, v in members(m)
        if getattr(v, "__module__", "") == m.__name__
    ]
    for name, value in exported + own:
        if inspect.isclass(value) or inspect.isfunction(value):
            found[name] = value
        if inspect.isclass(value):
            for method, member in members(value):
                if function_of(member) is not None:
                    found[f"{name}.{method}"] = function_of(member)
    return found


def test_every_public_api_function_has_a_docstring():
    api = public_api()
    assert {"zoo.train", "zoo.load_checkpoint", "zoo.Recipe.to_yaml", "zoo.family.Family.build_torch"} <= set(
        api
    )
    missing = sorted(name for name, value in api.items() if not (value.__doc__ or "").strip())
    assert missing == []
