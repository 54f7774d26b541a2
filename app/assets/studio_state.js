// The Studio's state as data: the op text, sizes, backend, target and knobs are written into
// the URL (a reload or a shared link reopens them) and into local storage (the Studio opened
// from the navigation bar reopens the state last kept). Called by clientside callbacks of
// app/callbacks/studio_state.py.
window.dash_clientside = Object.assign({}, window.dash_clientside, {
    studio_state: {
        KEY: "uol.studio.query",
        query: function (text, state, sizes, backend, target, loaded) {
            var params = new URLSearchParams();
            // a library op's own text is named by the op; other text travels whole
            if (loaded && loaded.op && loaded.odl && loaded.odl === text) {
                params.set("op", loaded.op);
            } else {
                params.set("odl", text || "");
            }
            params.set("backend", backend || "");
            params.set("target", target || "");
            params.set("sizes", (sizes || "").replace(/\s+/g, ""));
            // the knobs of the compiled kernel, when it is of these inputs
            if (state && state.ok && state.config && state.backend === backend
                    && state.target === target) {
                params.set("config", Object.keys(state.config).map(function (k) {
                    return k + "=" + state.config[k];
                }).join(","));
            }
            return params.toString();
        },
        changed: function (text, state, sizes, backend, target, init) {
            // a permalink (/run/N) keeps its URL until the user changes something in it
            init = init || {};
            if (text !== init.odl || backend !== init.backend || target !== init.target) {
                return true;
            }
            var config = (state && state.config) || {};
            var opened = init.config || {};
            return Object.keys(opened).some(function (k) {
                return config[k] !== undefined && String(config[k]) !== String(opened[k]);
            }) || (sizes || "").replace(/\s+/g, "") !== Object.keys(init.sizes || {}).map(
                function (k) { return k + "=" + init.sizes[k]; }).join(",");
        },
        remember: function (text, state, sizes, backend, target, loaded, init) {
            var self = window.dash_clientside.studio_state;
            var nu = window.dash_clientside.no_update;
            if (text === undefined || text === null) { return nu; }
            var query = self.query(text, state, sizes, backend, target, loaded);
            try { window.localStorage.setItem(self.KEY, query); } catch (e) { /* storage off */ }
            var onRun = /\/run\/[^\/]*$/.test(window.location.pathname);
            if (onRun && !self.changed(text, state, sizes, backend, target, init)) {
                return query;
            }
            var base = window.location.pathname.replace(/run\/[^\/]*$/, "");
            var url = base + "?" + query;
            if (window.location.pathname + window.location.search !== url) {
                window.history.replaceState(window.history.state, "", url);
            }
            return query;
        },
        // What the Result, roofline and history belong to: the compiled op, sizes, backend and
        // target (null for a compile that failed). A knob change keeps them.
        key: function (state) {
            if (!state || !state.ok) { return null; }
            var sizes = state.sizes || {};
            return JSON.stringify([state.op, Object.keys(sizes).sort().map(function (k) {
                return k + "=" + sizes[k];
            }), state.backend, state.target]);
        },
        // A compile of other inputs, or one that failed, empties the panels of the kernel
        // before (in the browser: no request for it); Apply best only for the tuned inputs.
        clear: function (state, shownFor, tuned, result, emptyFigure) {
            var self = window.dash_clientside.studio_state;
            var nu = window.dash_clientside.no_update;
            var key = self.key(state);
            var applyOff = !(tuned && key !== null && self.key(Object.assign(
                {ok: true}, tuned)) === key);
            if (shownFor && shownFor.key === key) { return [nu, nu, nu, applyOff, nu]; }
            var shown = JSON.stringify(result || "");
            if (!shownFor || (shown.indexOf("run-verdict") < 0 && shown.indexOf("run-cleared") < 0)) {
                return [nu, nu, nu, applyOff, {key: key}];
            }
            var why = "The ODL or the sizes have an error (see the editor): no kernel to run.";
            if (key !== null) {
                var sizes = state.sizes || {};
                why = "Inputs changed (" + state.op + " " + Object.keys(sizes).map(function (k) {
                    return k + "=" + sizes[k];
                }).join(",") + ", " + state.backend + " on " + state.target +
                    "): press Run to verify and time this kernel.";
            }
            var div = function (text, id) {
                var props = {children: text, className: "muted"};
                if (id) { props.id = id; }
                return {namespace: "dash_html_components", type: "Div", props: props};
            };
            return [div(why, "run-cleared"), emptyFigure || {},
                    div("No run of these inputs shown yet."), applyOff, {key: key}];
        },
        restore: function (wanted) {
            var self = window.dash_clientside.studio_state;
            var nu = window.dash_clientside.no_update;
            var saved = null;
            try { saved = window.localStorage.getItem(self.KEY); } catch (e) { saved = null; }
            if (wanted && saved && !window.location.search) {
                // the router re-renders the page from the query, as a reload would
                window.dash_clientside.set_props("_pages_location", {search: "?" + saved});
            }
            return nu;
        }
    }
});
