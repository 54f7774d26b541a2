// Assembly <-> C linking in the Studio: an assembly row carries data-cline (its kernel.c line).
// Hovering a row outlines that C line in the kernel pane and every row from the same C line;
// hovering a kernel line outlines the assembly rows it produced. (ODL linking is codemap.js's.)
(function () {
    var current = null;
    function mark(cline, on) {
        if (cline === null) { return; }
        var kernelLine = document.getElementById("k-" + cline);
        if (kernelLine) { kernelLine.classList.toggle("hot-c", on); }
        document.querySelectorAll('#asm-source [data-cline="' + cline + '"]').forEach(function (el) {
            el.classList.toggle("hot-c", on);
        });
    }
    function lineOf(target) {
        if (!target.closest) { return null; }
        var row = target.closest("#asm-source [data-cline]");
        if (row) { return row.getAttribute("data-cline"); }
        var line = target.closest('#kernel-source span[id^="k-"]');
        return line ? line.id.slice(2) : null;
    }
    document.addEventListener("mouseover", function (ev) {
        var cline = lineOf(ev.target);
        if (cline === current) { return; }
        mark(current, false);
        current = cline;
        mark(current, true);
    });
    // a click on an assembly row scrolls the kernel pane to its C line, and the reverse
    document.addEventListener("click", function (ev) {
        var cline = lineOf(ev.target);
        if (cline === null) { return; }
        var inAsm = ev.target.closest("#asm-source");
        var other = inAsm ? document.getElementById("k-" + cline)
                          : document.querySelector('#asm-source [data-cline="' + cline + '"]');
        var pane = other && other.closest(".code-blob");
        if (pane) { pane.scrollTop = other.offsetTop - pane.clientHeight / 3; }
    });
})();
