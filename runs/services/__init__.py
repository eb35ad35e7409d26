"""Every write of Benchsite. Each service takes keyword-only arguments, runs in one
transaction, records its audit event in that same transaction, and raises a domain error
(``runs.errors``) before anything is written when the input is not allowed."""
