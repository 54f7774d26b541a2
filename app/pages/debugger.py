"""Debugger page (placeholder until the debugger issue): the visual Triton debugger."""

import dash

from app.pages._placeholder import placeholder

dash.register_page(__name__, path="/debugger", name="Debugger", title="UOL Studio: Debugger",
                   order=2)

layout = placeholder("Kernel debugger", [
    "every program's loads, stores and masks of a Triton kernel (TRITON_INTERPRET=1)",
    "stepping through a kernel with tensor values beside the ODL line that produced them",
], [("uol debug OP", "run a kernel under the interpreter and print what each program touched"),
    ("uol explain OP", "why the kernel looks as it does")])
