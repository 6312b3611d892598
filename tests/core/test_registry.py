import pytest

from crisscross.core.registry import OPTIONAL, Registry, UnknownNameError


def make_registry() -> Registry[tuple]:
    registry: Registry[tuple] = Registry("thing")
    registry.register("plain")(lambda **kw: ("plain", kw))
    registry.register("file", takes_argument=True)(lambda arg, **kw: ("file", arg, kw))
    return registry


def test_create_by_name_and_with_argument():
    registry = make_registry()
    assert registry.create("plain") == ("plain", {})
    assert registry.create("file:/a/b.npz", extra=1) == ("file", "/a/b.npz", {"extra": 1})
    # Only the first colon separates the name: URLs and Windows paths survive.
    assert registry.create("file:https://host/x:y")[1] == "https://host/x:y"


def test_unknown_name_lists_known_ones():
    with pytest.raises(UnknownNameError, match=r"unknown thing 'nope'; known: file, plain"):
        make_registry().create("nope")


def test_argument_rules_are_enforced():
    registry = make_registry()
    with pytest.raises(ValueError, match="needs an argument"):
        registry.create("file")
    with pytest.raises(ValueError, match="takes no argument"):
        registry.create("plain:x")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("plain")(lambda: None)


def test_a_default_argument_fills_a_bare_name():
    registry = make_registry()
    registry.register("cut", takes_argument=True, default="0.2")(lambda arg: ("cut", arg))
    assert registry.create("cut") == ("cut", "0.2")
    assert registry.create("cut:0.1") == ("cut", "0.1")


def test_an_optional_argument_may_be_given_or_not():
    registry = make_registry()
    registry.register("truth", takes_argument=OPTIONAL)(lambda folder=None, **kw: ("truth", folder, kw))
    assert registry.create("truth", captions=1) == ("truth", None, {"captions": 1})
    assert registry.create("truth:/data/x") == ("truth", "/data/x", {})
