"""Mail app: the company mailbox as mbox files (mail/inbox.mbox, mail/sent.mbox)."""

from __future__ import annotations

import email.utils
import mailbox
from email.message import EmailMessage
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from acme_mcp.paths import WorldPaths, root_from_env

FOLDERS = ("inbox", "sent")
ME = "ops@acme-widgets.example"


def _body(msg: mailbox.mboxMessage) -> str:
    if msg.is_multipart():
        for part in msg.walk():
            if part.get_content_type() == "text/plain":
                return part.get_payload(decode=True).decode(part.get_content_charset() or "utf-8", "replace")
        return ""
    payload = msg.get_payload(decode=True)
    return payload.decode(msg.get_content_charset() or "utf-8", "replace") if payload else ""


def build_server(root: Path) -> MCPServer:
    paths = WorldPaths(root)
    server = MCPServer("mail", instructions=f"The Acme operations mailbox ({ME}).")

    def box(folder: str) -> mailbox.mbox:
        if folder not in FOLDERS:
            raise ToolError(f"no folder {folder!r}; folders are {', '.join(FOLDERS)}")
        full = paths.resolve(f"mail/{folder}.mbox", must_exist=False)
        full.parent.mkdir(parents=True, exist_ok=True)
        return mailbox.mbox(str(full))

    @server.tool()
    def list_messages(folder: str = "inbox", search: str | None = None) -> str:
        """List messages (id, date, sender, subject); 'search' filters on subject, sender and body."""
        mb = box(folder)
        lines = []
        for key, msg in mb.items():
            text = f"{msg['subject']} {msg['from']} {_body(msg)}"
            if search and search.lower() not in text.lower():
                continue
            lines.append(f"[{key}] {msg['date']} | from {msg['from']} | to {msg['to']} | {msg['subject']}")
        return "\n".join(lines) or "no messages"

    @server.tool()
    def read_message(message_id: int, folder: str = "inbox") -> str:
        """Read one message by the id list_messages shows."""
        mb = box(folder)
        try:
            msg = mb[message_id]
        except KeyError:
            raise ToolError(f"no message {message_id} in {folder}; use list_messages") from None
        return (
            f"From: {msg['from']}\nTo: {msg['to']}\nDate: {msg['date']}\nSubject: {msg['subject']}\n"
            f"Message-ID: {msg['message-id']}\n\n{_body(msg)}"
        )

    @server.tool()
    def send_message(to: str, subject: str, body: str, in_reply_to: str | None = None) -> str:
        """Send an email from the operations mailbox (it is filed in 'sent')."""
        if "@" not in to:
            raise ToolError(f"{to!r} is not an email address")
        msg = EmailMessage()
        msg["From"] = ME
        msg["To"] = to
        msg["Subject"] = subject
        msg["Date"] = email.utils.formatdate(usegmt=True)
        msg["Message-ID"] = email.utils.make_msgid(domain="acme-widgets.example")
        if in_reply_to:
            msg["In-Reply-To"] = in_reply_to
        msg.set_content(body)
        mb = box("sent")
        mb.lock()
        try:
            key = mb.add(msg)
            mb.flush()
        finally:
            mb.unlock()
        return f"sent message {key} to {to}"

    return server


if __name__ == "__main__":
    build_server(root_from_env()).run("stdio")
