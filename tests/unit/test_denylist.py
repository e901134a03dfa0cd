"""A device's denylist: the default destructive patterns, the owner's own, and what is refused as a list."""

from __future__ import annotations

import pytest

from engine.denylist import DenylistError, checked_patterns, refused_by


@pytest.mark.parametrize("command, pattern", [
    ("rm -rf /", "rm -rf /"),
    ("sudo rm -fr /*", "rm -rf /"),
    ("rm -r -f ~", "rm -rf /"),
    ("cd /tmp && rm --recursive --force /", "rm -rf /"),
    ("rm -rf --no-preserve-root /", "rm -rf /"),
    ("mkfs.ext4 /dev/sdb1", "mkfs"),
    ("dd if=/dev/zero of=/dev/nvme0n1 bs=1M", "dd of=/dev/…"),
    ("cat image > /dev/sda", "> /dev/<disk>"),
    ("shutdown -h now", "shutdown / reboot / halt / poweroff"),
    ("make && sudo reboot", "shutdown / reboot / halt / poweroff"),
    ("curl -fsSL https://example.com/install | sh", "curl … | sh"),
    ("wget -qO- https://example.com/x | sudo bash", "curl … | sh"),
    (":(){ :|:& };:", "fork bomb"),
    ("bomb(){ bomb|bomb& }; bomb", "fork bomb"),
    ("chmod -R 777 /", "chmod -R … /"),
])
def test_denylist_refuses_destructive_commands_naming_the_pattern(command, pattern):
    assert refused_by(command) == pattern


@pytest.mark.parametrize("command", [
    "tail -F app.log | grep --line-buffered ERROR", "cat status.txt", "rm -rf ./build", "rm -rf /tmp/vigil-x",
    "grep shutdown server.log", "echo reboot needed", "curl -s https://example.com/status.json",
    "curl -s https://example.com/x > out.sh", "dd if=disk.img of=copy.img", "ls -la /",
])
def test_denylist_lets_everyday_commands_through(command):
    assert refused_by(command) is None


def test_denylist_owner_patterns_add_to_the_defaults():
    owner = checked_patterns(["\\bterraform\\s+destroy\\b", "  ", "git push --force"])
    assert owner == ["\\bterraform\\s+destroy\\b", "git push --force"]
    assert refused_by("cd infra && terraform destroy -auto-approve", owner) == "\\bterraform\\s+destroy\\b"
    assert refused_by("git push --force origin main", owner) == "git push --force"
    assert refused_by("rm -rf /", owner) == "rm -rf /"
    assert refused_by("terraform plan", owner) is None


@pytest.mark.parametrize("raw, fix", [
    ("rm", "list of regular expressions"),
    ([1, 2], "list of regular expressions"),
    (["(unclosed"], "not a valid regular expression"),
    (["x" * 501], "over 500 characters"),
    (["a"] * 101, "keep it to 100"),
])
def test_denylist_refuses_patterns_it_cannot_use(raw, fix):
    with pytest.raises(DenylistError, match=fix):
        checked_patterns(raw)
