// The ODL editor as a code editor: a gutter of line numbers that scrolls with the text (long
// lines wrap, so no line is cut at any width), find (Ctrl+F / Cmd+F: every line with a match
// marked, Enter and Shift+Enter step through them, Escape closes), auto-indent (Enter keeps the
// line's indentation and adds a level after a line ending in ':'), Tab / Shift+Tab indent and
// dedent. The textarea stays the editor's value (Dash's odl-editor.value): every change goes
// through the browser's own text insertion, so undo and the callbacks see it as typing.
(function () {
    var INDENT = "    ";
    var AREA_ID = "odl-editor";

    function area() { return document.getElementById(AREA_ID); }
    function layer() { return document.getElementById("odl-highlight"); }

    function gutterOf(host) {
        var gutter = host.querySelector(".odl-gutter");
        if (!gutter) {
            gutter = document.createElement("div");
            gutter.className = "odl-gutter";
            gutter.id = "odl-gutter";
            gutter.appendChild(document.createElement("div"));
            host.insertBefore(gutter, host.firstChild);
        }
        return gutter;
    }

    // Number each line at the height its block has in the painted layer (wrapped lines are
    // taller), then follow the textarea's scroll.
    function layoutGutter() {
        var paint = layer(), text = area();
        if (!paint || !text) { return; }
        var gutter = gutterOf(paint.parentElement), inner = gutter.firstChild;
        var rows = paint.querySelectorAll(":scope > span[data-line]");
        var html = "";
        rows.forEach(function (row) {
            var n = row.getAttribute("data-line");
            var cls = row.classList.contains("err-line") ? "gl err" : "gl";
            if (row.classList.contains("find-current")) { cls += " cur"; }
            html += '<div class="' + cls + '" data-gutter-line="' + n + '" style="top:' +
                row.offsetTop + 'px">' + n + "</div>";
        });
        inner.innerHTML = html;
        inner.style.height = paint.scrollHeight + "px";
        syncScroll();
    }

    function syncScroll() {
        var paint = layer(), text = area();
        if (!paint || !text) { return; }
        paint.scrollTop = text.scrollTop;
        var gutter = paint.parentElement.querySelector(".odl-gutter");
        if (gutter) { gutter.firstChild.style.transform = "translateY(" + (-text.scrollTop) + "px)"; }
    }

    function insert(text) {
        // the browser's insertion: kept in the undo history and sent as an input event
        if (!document.execCommand("insertText", false, text)) {
            var el = area(), start = el.selectionStart;
            el.setRangeText(text, start, el.selectionEnd, "end");
            el.dispatchEvent(new Event("input", {bubbles: true}));
        }
    }

    function lineStart(value, pos) { return value.lastIndexOf("\n", pos - 1) + 1; }

    function onEnter(el, ev) {
        var value = el.value, pos = el.selectionStart;
        var line = value.slice(lineStart(value, pos), pos);
        var indent = (/^[ \t]*/.exec(line) || [""])[0];
        if (/:\s*$/.test(line) && !/^\s*#/.test(line)) { indent += INDENT; }
        ev.preventDefault();
        insert("\n" + indent);
    }

    function onTab(el, ev) {
        ev.preventDefault();
        var value = el.value, start = lineStart(value, el.selectionStart);
        if (!ev.shiftKey) { insert(INDENT); return; }
        var lead = (/^ {1,4}/.exec(value.slice(start)) || [""])[0];
        if (!lead) { return; }
        var keep = el.selectionStart;
        el.setSelectionRange(start, start + lead.length);
        document.execCommand("delete");
        var back = Math.max(start, keep - lead.length);
        el.setSelectionRange(back, back);
    }

    // ---- find ----
    var find = {bar: null, hits: [], current: -1};

    function findBar() {
        if (find.bar && document.body.contains(find.bar)) { return find.bar; }
        var host = area().parentElement;
        var bar = document.createElement("div");
        bar.className = "odl-find";
        bar.id = "odl-find";
        bar.innerHTML = '<input id="odl-find-input" placeholder="Find" spellcheck="false">' +
            '<span id="odl-find-count" class="muted"></span>' +
            '<button type="button" class="secondary" data-step="-1" title="Previous (Shift+Enter)">↑</button>' +
            '<button type="button" class="secondary" data-step="1" title="Next (Enter)">↓</button>' +
            '<button type="button" class="secondary" data-close="1" title="Close (Escape)">✕</button>';
        host.appendChild(bar);
        var input = bar.querySelector("input");
        input.addEventListener("input", function () { search(input.value); step(1, true); });
        input.addEventListener("keydown", function (ev) {
            if (ev.key === "Enter") { ev.preventDefault(); step(ev.shiftKey ? -1 : 1, false); }
            if (ev.key === "Escape") { ev.preventDefault(); closeFind(); }
        });
        bar.addEventListener("click", function (ev) {
            var b = ev.target.closest("button");
            if (!b) { return; }
            if (b.dataset.close) { closeFind(); } else { step(Number(b.dataset.step), false); }
        });
        find.bar = bar;
        return bar;
    }

    function search(term) {
        var value = area().value;
        find.hits = [];
        find.current = -1;
        if (term) {
            var low = value.toLowerCase(), t = term.toLowerCase(), at = low.indexOf(t);
            while (at >= 0) { find.hits.push([at, at + t.length]); at = low.indexOf(t, at + t.length); }
        }
    }

    function lineOf(pos) { return area().value.slice(0, pos).split("\n").length; }

    function markHits() {
        var paint = layer();
        if (!paint) { return; }
        paint.querySelectorAll(".find-hit, .find-current").forEach(function (el) {
            el.classList.remove("find-hit", "find-current");
        });
        if (!find.bar || find.bar.style.display === "none") { return; }
        find.hits.forEach(function (hit, i) {
            var row = document.getElementById("odl-line-" + lineOf(hit[0]));
            if (row) { row.classList.add(i === find.current ? "find-current" : "find-hit"); }
        });
        var count = document.getElementById("odl-find-count");
        count.textContent = find.hits.length ?
            (find.current + 1) + " of " + find.hits.length : "no match";
    }

    function step(direction, fromStart) {
        var n = find.hits.length;
        if (!n) { markHits(); layoutGutter(); return; }
        if (fromStart || find.current < 0) {
            var caret = area().selectionStart, i = 0;
            while (i < n && find.hits[i][0] < caret && !fromStart) { i++; }
            find.current = direction > 0 ? i % n : (i - 1 + n) % n;
        } else {
            find.current = (find.current + direction + n) % n;
        }
        var hit = find.hits[find.current], el = area();
        el.setSelectionRange(hit[0], hit[1]);  // shown as the selection once back in the text
        markHits();
        layoutGutter();
        var row = document.getElementById("odl-line-" + lineOf(hit[0]));
        if (row) {
            var top = row.offsetTop - el.clientHeight / 3;
            el.scrollTop = Math.max(0, top);
            syncScroll();
        }
    }

    function openFind() {
        var bar = findBar(), input = bar.querySelector("input"), el = area();
        bar.style.display = "";
        var picked = el.value.slice(el.selectionStart, el.selectionEnd);
        if (picked && picked.indexOf("\n") < 0) { input.value = picked; }
        search(input.value);
        markHits();
        input.focus();
        input.select();
    }

    function closeFind() {
        if (find.bar) { find.bar.style.display = "none"; }
        markHits();
        layoutGutter();
        var el = area();
        if (el) { el.focus(); }
    }

    document.addEventListener("keydown", function (ev) {
        var el = ev.target;
        if (!el || el.id !== AREA_ID) { return; }
        if ((ev.ctrlKey || ev.metaKey) && (ev.key === "f" || ev.key === "F")) {
            ev.preventDefault();
            openFind();
        } else if (ev.key === "Enter" && !ev.ctrlKey && !ev.metaKey && !ev.altKey && !ev.shiftKey) {
            onEnter(el, ev);
        } else if (ev.key === "Tab" && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
            onTab(el, ev);
        } else if (ev.key === "Escape" && find.bar && find.bar.style.display !== "none") {
            closeFind();
        }
    });
    document.addEventListener("scroll", function (ev) {
        if (ev.target && ev.target.id === AREA_ID) { syncScroll(); }
    }, true);
    var watched = null;
    var resize = new ResizeObserver(function () { layoutGutter(); });

    window.odlCodeEditor = {
        // called by odl.paint after each repaint of the layer
        painted: function () {
            var el = area();
            if (el && watched !== el) { watched = el; resize.observe(el); }
            if (find.bar && find.bar.style.display !== "none") {
                search(find.bar.querySelector("input").value);
                if (find.current >= find.hits.length) { find.current = find.hits.length - 1; }
            }
            markHits();
            layoutGutter();
        }
    };
})();
