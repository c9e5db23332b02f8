// postroom console: shows each UTC time of a page in the browser's own time
// zone as well, in its title (hover). Nothing else: every action is a form.
document.addEventListener("DOMContentLoaded", () => {
  for (const el of document.querySelectorAll("time[datetime]")) {
    const d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d)) el.title = d.toLocaleString();
  }
});
