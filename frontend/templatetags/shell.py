"""The app shell's data: the organizations the user may switch between and the current
organization's primary navigation.

Any page whose URL carries ``<org>`` gets the shell of that organization, provided the user
is a member of it (a stranger's 404 page shows no trace of the organization).
"""

from __future__ import annotations

from dataclasses import dataclass

from django import template
from django.urls import NoReverseMatch, reverse

from runs.access import Principal, principal_memberships

register = template.Library()

# (URL name, label). A section shows once its page exists: names that do not resolve yet
# are left out, so each area of the site appears in the navigation with its first page.
SECTIONS = (
    ("org-overview", "Overview"),
    ("models", "Models"),
    ("experiments", "Experiments"),
    ("runs", "Runs"),
    ("reports", "Reports"),
    ("audit", "Audit log"),
    ("org-settings", "Settings"),
)
# Pages of a section whose addresses are not under the section's own (URL names): the
# promotions are a part of Reports, whose sub-navigation lists them.
SECTION_PAGES = {"reports": ("promotions",)}


@dataclass(frozen=True)
class NavLink:
    label: str
    url: str
    current: bool


@dataclass(frozen=True)
class OrgChoice:
    slug: str
    name: str
    role: str
    url: str
    current: bool


def _reverse(name: str, **kwargs) -> str | None:
    try:
        return reverse(name, kwargs=kwargs)
    except NoReverseMatch:
        return None


@register.simple_tag(takes_context=True)
def site_shell(context) -> dict:
    """``{% site_shell as shell %}``: ``shell.orgs`` (the user's organizations, the current one
    marked), ``shell.org`` (the current one, or None) and ``shell.nav`` (its sections)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if request is None or not user.is_authenticated:
        return {"orgs": [], "org": None, "nav": []}
    match = request.resolver_match
    kwargs = match.kwargs if match else {}
    current_slug = kwargs.get("org")
    # Switching keeps the section when the page is an organization-wide one (the runs list of
    # acme → the runs list of globex); a page of one object leads to the overview instead.
    same_page = match.url_name if match and set(kwargs) == {"org"} else None

    orgs = []
    for membership in principal_memberships(Principal(user=user)):
        slug = membership.organization.slug
        url = (same_page and _reverse(same_page, org=slug)) or reverse("org-overview", args=[slug])
        name = membership.organization.name
        orgs.append(OrgChoice(slug, name, membership.role, url, current=slug == current_slug))
    org = next((choice for choice in orgs if choice.current), None)

    nav: list[NavLink] = []
    if org is not None:
        # The current section is the one owning the longest prefix of this page's address.
        owners: dict[str, str] = {}  # an address prefix → the URL of the section owning it
        links = []
        for name, label in SECTIONS:
            url = _reverse(name, org=org.slug)
            if url is None:
                continue
            links.append((label, url))
            pages = SECTION_PAGES.get(name, ())
            for prefix in (url, *(_reverse(page, org=org.slug) for page in pages)):
                if prefix:
                    owners[prefix] = url
        best = max((p for p in owners if request.path.startswith(p)), key=len, default=None)
        current = owners.get(best)
        nav = [NavLink(label, url, url == current) for label, url in links]
    return {"orgs": orgs, "org": org, "nav": nav}
