"""The door of every organization page: the caller's membership and role are settled before
the view runs, through ``runs.access`` and nothing else (as ``runs.api.scoping`` does for the
API).

Guarantees, in this order: an anonymous visitor is sent to sign in; a method the page does not
take answers 405; someone who is not a member of the organization in the address (or whose
account is inactive) gets 404, the same answer as for an organization that does not exist; a
member whose role may not do what the request asks gets 403. Only then does the view run,
with the membership in place of the address's organization slug.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.contrib.auth.decorators import login_required
from django.views.decorators.http import require_http_methods

from runs.access import Need, Principal, access_membership
from runs.models import Membership, Role


def org_page(*methods: str, need: Need = Need.READ, post: Need | None = None) -> Callable:
    """Makes ``view(request, membership, **ids)`` the page at ``o/<org>/…``.

    ``methods`` are the HTTP methods it answers (GET when none are named); ``need`` is what
    the role must allow for any of them, ``post`` (when given) what a POST needs instead —
    a page that lists for everyone and adds for admins is ``org_page("GET", "POST",
    post=Need.MANAGE)``.
    """
    allowed = require_http_methods(list(methods or ("GET",)))

    def decorate(view: Callable) -> Callable:
        @functools.wraps(view)
        def page(request, org: str, *args, **kwargs):
            wanted = post if post is not None and request.method == "POST" else need
            membership = access_membership(
                principal=Principal(user=request.user), org_slug=org, need=wanted
            )
            return view(request, membership, *args, **kwargs)

        door = login_required(allowed(page))
        door.org_page = True  # what the URL test looks for on every organization route
        return door

    return decorate


def org_context(membership: Membership, **extra) -> dict:
    """What every organization page's template is given: the membership, the organization,
    and what the caller's role allows (writing; managing members, tokens, budgets, keys)."""
    role = Role(membership.role)
    return {
        "membership": membership,
        "org": membership.organization,
        "can_write": role.can_write,
        "can_manage": role.can_manage,
    } | extra
