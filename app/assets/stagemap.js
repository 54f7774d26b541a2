// Triton stage <-> Triton source linking in the Studio: a stage row carries data-kline (the line
// of the generated Triton kernel it came from). Hovering a row outlines that kernel line and every
// stage row from it; hovering a kernel line outlines the stage rows it produced. A click on a
// stage row scrolls the kernel pane to its line and marks it as the landing line; a click on a
// kernel line scrolls the stage listing to its first row. (ODL linking is codemap.js's.)
(function () {
    var current = null;
    function mark(kline, on) {
        if (kline === null) { return; }
        var line = document.getElementById("k-" + kline);
        if (line) { line.classList.toggle("hot-c", on); }
        document.querySelectorAll('#stage-source [data-kline="' + kline + '"]').forEach(function (el) {
            el.classList.toggle("hot-c", on);
        });
    }
    function lineOf(target) {
        if (!target.closest || !document.getElementById("stage-source")) { return null; }
        var row = target.closest("#stage-source [data-kline]");
        if (row) { return row.getAttribute("data-kline"); }
        var line = target.closest('#kernel-source span[id^="k-"]');
        return line ? line.id.slice(2) : null;
    }
    function scrollTo(el) {
        var pane = el && el.closest(".code-blob");
        if (pane) { pane.scrollTop = el.offsetTop - pane.clientHeight / 3; }
    }
    document.addEventListener("mouseover", function (ev) {
        var kline = lineOf(ev.target);
        if (kline === current) { return; }
        mark(current, false);
        current = kline;
        mark(current, true);
    });
    // registered after codemap.js's click (assets load in name order): this scroll, to the
    // exact line, is the one that stays
    document.addEventListener("click", function (ev) {
        var kline = lineOf(ev.target);
        if (kline === null) { return; }
        if (ev.target.closest("#stage-source")) {
            document.querySelectorAll("#kernel-source .landed").forEach(function (el) {
                el.classList.remove("landed");
            });
            var line = document.getElementById("k-" + kline);
            if (line) { line.classList.add("landed"); scrollTo(line); }
        } else {
            scrollTo(document.querySelector('#stage-source [data-kline="' + kline + '"]'));
        }
    });
})();
