// ODL editor highlighting: the textarea is transparent; this paints the layer under it.
// Called by a clientside callback with the text, the error line and the mapped ODL lines.
window.dash_clientside = Object.assign({}, window.dash_clientside, {
    odl: {
        // Paint a server-rendered code blob ({html, pane}) into its host element.
        blob: function (data, hostId) {
            var host = document.getElementById(hostId);
            if (!host) { return ""; }
            host.innerHTML = data && data.html ? data.html : '<div class="muted">' + ((data && data.note) || "") + "</div>";
            return String(Date.now());
        },
        paint: function (text, state) {
            state = state || {};
            // the error and the map belong to the text that was compiled
            var same = state.odl === text;
            var errorLine = same ? state.error_line : 0;
            var mapped = same ? state.mapped : [];
            var layer = document.getElementById("odl-highlight");
            if (!layer) { return ""; }
            var esc = function (s) { return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); };
            var rules = [
                [/^#.*/, "c1"], [/^\b(op|aliases)\b/, "k"],
                [/^\b(f16|bf16|f32|f64|i32|i8|bool)\b/, "kt"],
                [/^\b(sum|max|min|mean|prod|cumsum|cumprod|cummax|exp|log|sqrt|rsqrt|tanh|sigmoid|relu|gelu|gelu_tanh|silu|abs|erf|sin|cos|floor|ceil|pow|where|pad)\b/, "nb"],
                [/^\d+\.?\d*([eE][-+]?\d+)?/, "m"], [/^(->|\*\*|<=|>=|==|!=|[-+*\/<>=])/, "o"],
                [/^[A-Za-z_]\w*/, "n"], [/^\s+/, ""], [/^./, "p"]
            ];
            var mappedSet = {};
            (mapped || []).forEach(function (l) { mappedSet[l] = true; });
            var lines = (text || "").split("\n");
            var html = lines.map(function (line, i) {
                var n = i + 1, out = "", rest = line;
                while (rest.length) {
                    for (var r = 0; r < rules.length; r++) {
                        var m = rules[r][0].exec(rest);
                        if (m) {
                            var tok = esc(m[0]);
                            out += rules[r][1] ? '<span class="' + rules[r][1] + '">' + tok + "</span>" : tok;
                            rest = rest.slice(m[0].length);
                            break;
                        }
                    }
                }
                var cls = [];
                if (n === errorLine) { cls.push("err-line"); }
                var attrs = ' id="odl-line-' + n + '" data-line="' + n + '"';
                if (mappedSet[n]) { cls.push("mapped", "map-c" + (n % 8)); attrs += ' data-odl="' + n + '"'; }
                // one block per line: a long line wraps in the layer as in the textarea above
                // it; the line numbers are in the gutter (assets/code_editor.js)
                return '<span' + attrs + (cls.length ? ' class="' + cls.join(" ") + '"' : "") + ">" + out + "</span>";
            }).join("");
            layer.innerHTML = html;
            if (window.odlCodeEditor) { window.odlCodeEditor.painted(layer, errorLine); }
            return String(lines.length);
        }
    }
});
