"""Telling an organization's hooks what happened: webhooks, Slack-compatible incoming
webhooks and e-mail. One module per job:

- ``hooks``: an organization's hooks, created (their URL and signing secret encrypted),
  deleted and tested, audited;
- ``outbox``: ``notify``, a fact recorded once and a delivery for each hook that asked for
  it, sent by a worker after the commit;
- ``transport``: one attempt to send a delivery (a signed webhook, a Slack text, an e-mail);
- ``delivery``: attempts, their log and retries (the task's and the sweep's side);
- ``events``: what each event says (a run's end, a regression, a promotion, the budget).

An organization's hooks, and the tests and confirmation rounds sent to them, are limited
(``runs.services.hook_limits``); an e-mail hook writes only to the addresses that confirmed
it (``runs.services.hook_recipients``); deliveries travel on their own queue
(``benchsite.queues``).

Secrets never leave: the URL (its path may be a credential, as Slack's is) and the signing
secret are stored encrypted; the delivery log and every error keep the receiver's status or
the failure's kind only, never the URL's path, a header or a secret; the audit log records a
hook by its name, kind and host.
"""
