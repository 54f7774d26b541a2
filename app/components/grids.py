"""Tables of the IDE on dash-ag-grid (dash_table.DataTable is deprecated): sortable and
filterable columns, optional row selection by checkbox or radio, markdown link cells and
per-cell tooltips, built the same way on every page."""

from __future__ import annotations

import dash_ag_grid as dag

MODES = {"multi": "multiRow", "single": "singleRow"}


def grid(grid_id: str, rows: list[dict], columns: list[tuple[str, str]], *,
         selection: str | None = None, page_size: int | None = 20,
         links: tuple[str, ...] = (), tooltips: dict[str, str] | None = None,
         row_id: str | None = "id", height: int | None = None,
         numeric: tuple[str, ...] = ()) -> dag.AgGrid:
    """An AgGrid of `rows` with `columns` as (field, header). `selection` "multi" or "single"
    puts a checkbox (radio for one) before each row; `links` are fields holding markdown
    links (opened in this tab); `tooltips` maps a field to the field holding its tooltip;
    `row_id` names the field that identifies a row, so a selection survives a re-sort;
    `numeric` fields sort and filter as numbers."""
    tips = tooltips or {}
    defs = []
    for field, header in columns:
        col: dict = {"field": field, "headerName": header}
        if field in links:
            col.update(cellRenderer="markdown", linkTarget="_self")
        if field in tips:
            col["tooltipField"] = tips[field]
        if field in numeric:
            col.update(type="numericColumn", filter="agNumberColumnFilter")
        defs.append(col)
    # every column rendered (tables of tens of rows): a row's checkbox or link stays in the
    # page when the grid is scrolled sideways
    # field names are flat keys ("peak_gflops.fp32" is one column, not a nested object)
    options: dict = {"tooltipShowDelay": 300, "enableCellTextSelection": True,
                     "suppressColumnVirtualisation": True, "suppressFieldDotNotation": True}
    if selection:
        # one row: a click on it selects it too (as a radio list); several: by the boxes only,
        # so a click on a permalink does not change the selection
        options["rowSelection"] = {"mode": MODES[selection], "checkboxes": True,
                                   "enableClickSelection": selection == "single",
                                   "headerCheckbox": False}
        options["selectionColumnDef"] = {"pinned": "left"}  # the box stays beside the row
    if page_size:
        options.update(pagination=True, paginationPageSize=page_size,
                       paginationPageSizeSelector=False)
    else:
        options["domLayout"] = "autoHeight"
    return dag.AgGrid(
        id=grid_id, rowData=rows, columnDefs=defs,
        defaultColDef={"sortable": True, "filter": True, "resizable": True, "wrapText": True,
                       "autoHeight": True, "minWidth": 60},
        dashGridOptions=options, columnSize="autoSize",
        getRowId=f"params.data.{row_id}" if row_id else None,
        selectedRows=[] if selection else None,
        style={"height": f"{height}px" if height else
               ("560px" if page_size else None), "width": "100%"},
        className="uol-grid")


def selected_ids(selected) -> list[int]:
    """The integer ids of a grid's selected rows; anything else a client sent is left out."""
    out = []
    for row in selected if isinstance(selected, list) else []:
        try:
            out.append(int(row["id"]))
        except (TypeError, KeyError, ValueError):
            continue
    return out
