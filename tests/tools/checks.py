"""The assertion of the tools' test scripts: a failed check ends the script with its reason."""


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")
