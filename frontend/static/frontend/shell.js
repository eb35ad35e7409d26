// The app shell: the phone menu and the organization switcher. Without this script the
// navigation simply stays open and the switcher is a plain <details>.
(function () {
  "use strict";
  const toggle = document.querySelector(".nav-toggle");
  const nav = document.getElementById("primary-nav");
  if (toggle && nav) {
    toggle.addEventListener("click", function () {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      nav.classList.toggle("open", open);
    });
  }
  // A box that scrolls (a wide table, the run timeline) must be reachable by keyboard to be
  // scrolled without a mouse; one that fits gets no extra tab stop. Boxes change as the
  // window resizes and as live pages re-render their tables, so they are checked again.
  const SCROLL_BOXES = ".table-wrap, .table-scroll, .timeline";
  function scrollBoxLabel(box) {
    const caption = box.querySelector("caption");
    const section = box.closest("section, article");
    const heading = section && section.querySelector("h2, h3");
    const text = (caption || heading || {}).textContent || "";
    return text.trim().replace(/\s+/g, " ") || "Scrollable content";
  }
  function markScrollBoxes() {
    document.querySelectorAll(SCROLL_BOXES).forEach(function (box) {
      const scrolls = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      if (scrolls && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.dataset.scrollBox = "";
        // A list keeps its own role; a plain box becomes a named region.
        if (box.tagName === "DIV" && !box.hasAttribute("role")) {
          box.setAttribute("role", "region");
          box.setAttribute("aria-label", scrollBoxLabel(box) + " (scrolls)");
        }
      } else if (!scrolls && "scrollBox" in box.dataset) {
        box.removeAttribute("tabindex");
        delete box.dataset.scrollBox;
        if (box.getAttribute("role") === "region") {
          box.removeAttribute("role");
          box.removeAttribute("aria-label");
        }
      }
    });
  }
  let pending = false;
  function markSoon() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; markScrollBoxes(); });
  }
  markScrollBoxes();
  window.addEventListener("resize", markSoon);
  const main = document.getElementById("main");
  if (main && window.MutationObserver) {
    new MutationObserver(markSoon).observe(main, { childList: true, subtree: true });
  }

  const switcher = document.querySelector(".org-switcher");
  if (switcher) {
    // Close on a click elsewhere and on Escape, like any menu.
    document.addEventListener("click", function (event) {
      if (switcher.open && !switcher.contains(event.target)) switcher.open = false;
    });
    switcher.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && switcher.open) {
        switcher.open = false;
        switcher.querySelector("summary").focus();
      }
    });
  }
})();
