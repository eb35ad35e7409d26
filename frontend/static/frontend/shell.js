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
