"""``functions.config``: Pulsar's FunctionConfig checked and defaulted, bad ones refused by
name, and a ``.py`` package checked for the class it is said to define (without running it)."""

from __future__ import annotations

import pytest

from magnetar.functions import config
from magnetar.functions.config import ConfigError, FunctionName

NAME = FunctionName("public", "default", "f")


def check(**raw: object) -> dict[str, object]:
    return config.check(
        {"className": "m.C", "inputs": ["in"], **raw}, name=NAME, package_file="m.py"
    )


def test_defaults_are_pulsars() -> None:
    c = check()
    assert c["inputs"] == ["persistent://public/default/in"]
    assert c["processingGuarantees"] == "ATLEAST_ONCE"
    assert c["subName"] == "public/default/f"
    assert c["subscriptionPosition"] == "Latest"
    assert c["parallelism"] == 1
    assert c["autoAck"] is True and c["runtime"] == "PYTHON"
    assert c["resources"] == {"cpu": 1.0, "ram": 1073741824, "disk": 10737418240}
    assert c["tenant"] == "public" and c["name"] == "f" and c["py"] == "m.py"
    assert "output" not in c


def test_topics_are_completed() -> None:
    c = check(output="acme/ns/out", inputs=["persistent://a/b/c", "x/y/z"], logTopic="log")
    assert c["inputs"] == ["persistent://a/b/c", "persistent://x/y/z"]
    assert c["output"] == "persistent://acme/ns/out"
    assert c["logTopic"] == "persistent://public/default/log"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"inputs": []}, "no input topic"),
        ({"className": None}, "className is required"),
        ({"className": "not a name"}, "not a Python name"),
        ({"processingGuarantees": "TWICE"}, "processingGuarantees"),
        ({"parallelism": 0}, "parallelism"),
        ({"parallelism": 1000}, "over"),
        ({"jar": "f.jar"}, "Java functions"),
        ({"runtime": "GO"}, "only PYTHON"),
        ({"tenant": "other"}, "does not match"),
        ({"output": "in"}, "also an input"),
        ({"deadLetterTopic": "dlq"}, "needs maxMessageRetries"),
        ({"maxMessageRetries": 2, "processingGuarantees": "EFFECTIVELY_ONCE"}, "do not go with"),
        ({"subscriptionPosition": "Middle"}, "Latest or Earliest"),
        ({"inputs": ["a/b"]}, "not a topic name"),
        ({"topicsPattern": "persistent://public/default/in-[", "inputs": []}, "topicsPattern"),
        ({"resources": {"gpu": 1}}, "unknown"),
        ({"userConfig": [1]}, "JSON object"),
        ({"retainOrdering": True, "retainKeyOrdering": True}, "exclude each other"),
    ],
)
def test_bad_configs_name_the_problem(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check(**raw)


SOURCE = b"""
from pulsar import Function

class Exclaim(Function):
    def process(self, input, context):
        return input + "!"
"""


def test_source_defines_the_class() -> None:
    config.check_source(SOURCE, file_name="ex.py", class_name="ex.Exclaim")
    config.check_source(b"def process(x):\n    return x\n", file_name="m.py", class_name="m")
    with pytest.raises(ConfigError, match="defines no 'Missing'"):
        config.check_source(SOURCE, file_name="ex.py", class_name="ex.Missing")
    with pytest.raises(ConfigError, match=r"expected ex\.<Class>"):
        config.check_source(SOURCE, file_name="ex.py", class_name="other.Exclaim")
    with pytest.raises(ConfigError, match="no top-level process"):
        config.check_source(SOURCE, file_name="ex.py", class_name="ex")
    with pytest.raises(ConfigError, match="not valid Python"):
        config.check_source(b"def (:", file_name="ex.py", class_name="ex.X")


def test_package_names() -> None:
    assert config.check_package_name("/tmp/dir/ex.py") == "ex.py"
    assert config.check_package_name("d/my_fn-1.0-py3-none-any.whl") == "my_fn-1.0-py3-none-any.whl"
    for bad in ("my-fn.py", "f.jar", ".zip"):
        with pytest.raises(ConfigError, match=r"expected a \.py module"):
            config.check_package_name(bad)
    for bad in ("f.whl", "my_fn-1.0.whl", "-1.0-py3-none-any.whl"):
        with pytest.raises(ConfigError, match="not a wheel's file name"):
            config.check_package_name(bad)


def test_update_replaces_given_fields() -> None:
    stored = check(parallelism=2)
    merged = config.merge_update(stored, {"parallelism": 3, "output": None})
    assert merged["parallelism"] == 3 and merged["inputs"] == stored["inputs"]


def zipped(files: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_zip_layouts() -> None:
    pulsars = zipped(
        {
            "ex/src/ex.py": SOURCE,
            "ex/requirements.txt": b"inflection==0.5.1\n",
            "ex/deps/inflection-0.5.1-py2.py3-none-any.whl": b"",
        }
    )
    layout = config.zip_layout(pulsars, file_name="ex.zip", class_name="ex.Exclaim")
    assert layout == config.ZipLayout(
        source_dir="ex/src",
        module_file="ex/src/ex.py",
        requirements="ex/requirements.txt",
        deps_dir="ex/deps",
    )
    top = config.zip_layout(zipped({"ex.py": SOURCE}), file_name="t.zip", class_name="ex.Exclaim")
    assert (top.source_dir, top.requirements, top.deps_dir) == ("", None, None)
    for data, class_name, message in (
        (b"not a zip", "ex.Exclaim", "not a valid zip"),
        (zipped({"other.py": SOURCE}), "ex.Exclaim", "no ex.py"),
        (zipped({"ex.py": SOURCE}), "ex.Missing", "defines no 'Missing'"),
        (zipped({"../ex.py": SOURCE}), "ex.Exclaim", "unsafe path"),
    ):
        with pytest.raises(ConfigError, match=message):
            config.zip_layout(data, file_name="f.zip", class_name=class_name)
    assert config.check_package_name("dir/f.zip") == "f.zip"


WHEEL_INFO = {
    "fn-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "fn-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fn\nVersion: 1.0\n",
}


def test_wheel_layouts() -> None:
    wheel = zipped({**WHEEL_INFO, "fn/__init__.py": b"", "fn/ex.py": SOURCE})
    assert config.wheel_layout(wheel, file_name="w.whl", class_name="fn.ex.Exclaim") == "fn/ex.py"
    native = zipped({**WHEEL_INFO, "ex.py": b"def process(input):\n    return input\n"})
    assert config.wheel_layout(native, file_name="w.whl", class_name="ex") == "ex.py"
    package = zipped({**WHEEL_INFO, "fn/__init__.py": SOURCE})
    assert config.wheel_layout(package, file_name="w.whl", class_name="fn.Exclaim") == (
        "fn/__init__.py"
    )
    for data, class_name, message in (
        (b"not a zip", "fn.ex.Exclaim", "not a valid wheel"),
        (zipped({"fn/ex.py": SOURCE}), "fn.ex.Exclaim", r"no \*\.dist-info/WHEEL"),
        (wheel, "fn.other.Exclaim", r"no module fn\.other \(fn/other\.py or"),
        (wheel, "fn.ex.Missing", "defines no 'Missing'"),
        (native, "ex.Exclaim", "defines no 'Exclaim'"),
        (zipped({**WHEEL_INFO, "../ex.py": SOURCE}), "ex.Exclaim", "unsafe path"),
    ):
        with pytest.raises(ConfigError, match=message):
            config.wheel_layout(data, file_name="w.whl", class_name=class_name)
