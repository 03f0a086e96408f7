#!/usr/bin/env bash
# Oracle: send the reply the way the mail app files it (mbox at /workspace/mail/sent.mbox).
set -euo pipefail
mkdir -p /workspace/mail
python3 - <<'PY'
import mailbox
from email.message import EmailMessage
m = EmailMessage()
m["From"], m["To"], m["Subject"] = "ops@acme-widgets.example", "dana@brightline.example", "Re: Where is order #4471?"
m.set_content("Hi Dana,\n\nOrder #4471 ships on 2024-10-18 from our Dayton warehouse.\n\nBest regards,\nAcme Operations")
box = mailbox.mbox("/workspace/mail/sent.mbox")
box.add(m)
box.flush()
PY
