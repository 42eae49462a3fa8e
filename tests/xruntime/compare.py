"""Compares the per-case digests of every runtime against the native engine's.

Usage: compare.py LABEL=FILE...   (the first is the reference: the native engine)

Each FILE holds one `name digest outcome` line per case, in corpus order. Fails (exit 1) when a
runtime produced a different number of cases, a different case order, or a different digest or
outcome for any case; the first differing case is shown with every runtime's digest.
Standard library only: it runs with the system python3.
"""

import sys


def read(label, path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if len(fields) != 3:
                print(f"{label}: {path}:{number} is not `name digest outcome`: {line!r}")
                sys.exit(1)
            rows.append(tuple(fields))
    return rows


def main():
    runs = []
    for arg in sys.argv[1:]:
        label, _, path = arg.partition("=")
        if not path:
            print(f"usage: compare.py LABEL=FILE... (got {arg!r})")
            return 2
        runs.append((label, read(label, path)))
    if len(runs) < 2:
        print("usage: compare.py LABEL=FILE... (at least two runtimes)")
        return 2
    reference_label, reference = runs[0]
    if not reference:
        print(f"{reference_label} produced no cases")
        return 1

    failed = set()
    short = []
    for label, rows in runs[1:]:
        if len(rows) != len(reference):
            short.append(f"{label} produced {len(rows)} cases, {reference_label} {len(reference)}")
    first = None
    for index, (name, digest, outcome) in enumerate(reference):
        seen = {label: rows[index] if index < len(rows) else None for label, rows in runs}
        if any(row != (name, digest, outcome) for row in seen.values()):
            failed.add(name)
            if first is None:
                first = (index, name, seen)

    for problem in short:
        print(f"error: {problem}")
    if first is not None:
        index, name, seen = first
        print(f"error: first differing case #{index + 1} `{name}`:")
        for label, row in seen.items():
            shown = "(missing)" if row is None else f"{row[1]} {row[2]}" + (
                "" if row[0] == name else f" (for case `{row[0]}`)")
            print(f"  {label:<10} {shown}")
    labels = ", ".join(label for label, _ in runs)
    total = len(reference)
    if failed or short:
        print(f"cross-runtime conformance ({labels}): {len(failed)} of {total} cases differ")
    else:
        print(f"cross-runtime conformance: {labels} agree on every one of {total} cases")
    # The plain closing line CI reads.
    print(f"{total - len(failed)} passed, {len(failed) + (1 if short and not failed else 0)} failed")
    return 1 if failed or short else 0


if __name__ == "__main__":
    sys.exit(main())
