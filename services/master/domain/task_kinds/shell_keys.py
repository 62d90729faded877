"""Each shell's SSH key pair (Determined makes one per shell): made by the master at launch, the
public key handed to the shell's SSH server through its environment, the private key given only
to the shell's owner or an admin. Ed25519: small, fast to make, and accepted by every OpenSSH
client since 6.5."""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import access, scopes
from services.master.domain.identity.permissions import Permission
from services.master.store import models


@dataclass(frozen=True)
class KeyPair:
    private_key: str  # "-----BEGIN OPENSSH PRIVATE KEY-----\n..."
    public_key: str  # "ssh-ed25519 AAAA..."


def generate(comment: str) -> KeyPair:
    """A new key pair; `comment` ends the public key's line (it names the shell)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(private_key=private, public_key=f"{public.decode()} {comment}")


def store(s: Session, task_id: str, pair: KeyPair) -> None:
    s.add(models.ShellKey(task_id=task_id, private_key=pair.private_key, public_key=pair.public_key))


def public_key(s: Session, task_id: str) -> str:
    row = s.get(models.ShellKey, task_id)
    return row.public_key if row is not None else ""


def may_hold_private_key(s: Session, principal: Principal, task: models.Task) -> bool:
    """Whoever may open the shell (identity/access.py: its owner, or who may change others' tasks)."""
    return access.may_change(principal, Permission.UPDATE_NSC, scopes.of_task(s, task), [task.owner_id], s)


def keys_for(s: Session, principal: Principal, task: models.Task) -> KeyPair:
    """The shell's keys as `principal` may see them: the private key only for its owner or an admin."""
    row = s.get(models.ShellKey, task.id)
    if row is None:
        return KeyPair(private_key="", public_key="")
    private = row.private_key if may_hold_private_key(s, principal, task) else ""
    return KeyPair(private_key=private, public_key=row.public_key)
