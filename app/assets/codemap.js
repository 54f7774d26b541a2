// Hover/click mapping between the ODL pane and the kernel pane: spans carry data-odl (the ODL
// line); hovering any span highlights every span with the same ODL line in both panes.
(function () {
    function mark(odl, on) {
        document.querySelectorAll('[data-odl="' + odl + '"]').forEach(function (el) {
            el.classList.toggle("hot", on);
        });
    }
    var current = null;
    document.addEventListener("mouseover", function (ev) {
        var el = ev.target.closest && ev.target.closest("[data-odl]");
        var odl = el ? el.getAttribute("data-odl") : null;
        if (odl === current) { return; }
        if (current !== null) { mark(current, false); }
        current = odl;
        if (odl !== null) { mark(odl, true); }
    });
    // The ODL editor is a textarea over a painted layer: find the line from the mouse height.
    document.addEventListener("mousemove", function (ev) {
        if (!ev.target || ev.target.id !== "odl-editor") { return; }
        // the painted line under the mouse: the last whose top is above it (a wrapped line is
        // taller than one row)
        var area = ev.target;
        var y = ev.clientY - area.getBoundingClientRect().top + area.scrollTop;
        var row = null;
        document.querySelectorAll("#odl-highlight > span[data-line]").forEach(function (r) {
            if (r.offsetTop <= y) { row = r; }
        });
        var odl = row ? row.getAttribute("data-odl") : null;
        if (odl === current) { return; }
        if (current !== null) { mark(current, false); }
        current = odl;
        if (odl !== null) { mark(odl, true); }
    });
    document.addEventListener("click", function (ev) {
        var el = ev.target.closest && ev.target.closest("[data-odl]");
        if (!el) { return; }
        var odl = el.getAttribute("data-odl");
        var pane = el.closest(".code-blob, .odl-editor");
        // scroll the other pane to its first line of the same ODL line
        document.querySelectorAll('[data-odl="' + odl + '"]').forEach(function (other) {
            var otherPane = other.closest(".code-blob");
            if (otherPane && otherPane !== pane && !other.dataset.scrolled) {
                otherPane.scrollTop = other.offsetTop - otherPane.clientHeight / 3;
            }
        });
    });
})();
