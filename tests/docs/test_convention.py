"""The docs convention itself: what a marker means, and that nothing unmarked slips through."""

from __future__ import annotations

from tests.docs.blocks import parse_text

PAGE = """# A page

Save this as `myapp/jobs.py`:

```python
x = 1
```

```json
{"unmarked": true}
```

<!-- not run: output -->
```
done
```

<!-- run: background postgresql mariadb timeout=5 -->
```sh
caravel worker
```

<!-- not run: maybe -->
```sh
true
```

<!-- run: forever -->
```sh
true
```
"""


def test_markers_file_names_and_unknown_blocks() -> None:
    named, unmarked, output, worker, bad_kind, bad_option = parse_text("page.md", PAGE)
    assert (named.file_name, named.line, named.runnable) == ("myapp/jobs.py", 5, True)
    assert unmarked.unrunnable is not None
    assert "page.md:9" in unmarked.unrunnable
    assert not unmarked.runnable
    assert (output.not_run, output.unrunnable, output.runnable) == ("output", None, False)
    assert worker.options == {"background", "postgresql", "mariadb"}
    assert worker.timeout == 5.0
    assert worker.runnable
    assert bad_kind.problems
    assert not bad_kind.runnable
    assert bad_option.problems
    assert "forever" in bad_option.problems[0]
