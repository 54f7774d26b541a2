"""Recursive-descent parser: ODL text -> checked Op IR (entry points `parse` and `parse_module`)."""

from __future__ import annotations

from uol_core.odl.errors import OdlError
from uol_core.odl.ir import (
    BINARY_FUNCTIONS,
    REDUCTIONS,
    SCANS,
    UNARY_FUNCTIONS,
    Access,
    Affine,
    Binary,
    Call,
    Cast,
    Const,
    DType,
    Expr,
    Op,
    Reduce,
    Scan,
    Stmt,
    TensorDecl,
    Unary,
    Var,
)
from uol_core.odl.lexer import Token, tokenize
from uol_core.odl.literals import number_literal

MAX_STATEMENTS = 64
MAX_DEPTH = 60
INDEX_LIMIT = 2**62  # affine forms add and scale these; C computes them in int64
KEYWORDS = {"op", "and", "or", "not"}
SPECIAL_CALLS = {"where", "pad"}
_COMPARE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_DTYPES = {d.value: d for d in DType}


def parse(text: str, filename: str = "<odl>") -> Op:
    """Parse text holding exactly one operator into checked IR."""
    ops = parse_module(text, filename)
    if len(ops) != 1:
        raise OdlError(f"expected exactly one operator, found {len(ops)}", 1, 1,
                       "use parse_module for files with several operators",
                       source=text, filename=filename)
    return ops[0]


def parse_module(text: str, filename: str = "<odl>") -> list[Op]:
    """Parse text holding one or more operators into checked IR."""
    from uol_core.odl.check import (
        check_op,  # check imports the IR only; late import keeps layering clear
    )

    try:
        ops = _Parser(tokenize(text), text).module()
        return [check_op(op) for op in ops]
    except OdlError as err:
        err.source = text
        err.filename = filename
        raise
    except RecursionError:
        raise OdlError("expression nested too deeply", 1, 1, f"keep nesting below {MAX_DEPTH}",
                       source=text, filename=filename) from None


class _Parser:
    def __init__(self, tokens: list[Token], source: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.source = source
        self.depth = 0

    # ------------------------------------------------------------ token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def at(self, text: str) -> bool:
        return self.tok.kind in ("PUNCT", "NAME") and self.tok.text == text

    def advance(self) -> Token:
        tok = self.tok
        if tok.kind != "EOF":
            self.pos += 1
        return tok

    def error(self, expected: str, tok: Token | None = None, hint: str = "") -> OdlError:
        tok = tok or self.tok
        found = {"NEWLINE": "end of line", "EOF": "end of file"}.get(tok.kind, repr(tok.text))
        return OdlError(f"expected {expected}, found {found}", tok.line, tok.column, hint)

    def expect(self, text: str, hint: str = "") -> Token:
        if not self.at(text):
            raise self.error(repr(text), hint=hint)
        return self.advance()

    def expect_name(self, what: str) -> Token:
        tok = self.tok
        if tok.kind != "NAME" or tok.text in KEYWORDS:
            raise self.error(what)
        return self.advance()

    def skip_newlines(self) -> None:
        while self.tok.kind == "NEWLINE":
            self.advance()

    # ------------------------------------------------------------ structure
    def module(self) -> list[Op]:
        ops: list[Op] = []
        self.skip_newlines()
        if self.tok.kind == "EOF":
            raise OdlError("expected an operator ('op name(...) -> ...:'), found an empty file", 1, 1)
        while self.tok.kind != "EOF":
            ops.append(self.op())
            self.skip_newlines()
        return ops

    def op(self) -> Op:
        head = self.tok
        if not self.at("op") or head.indented:
            raise self.error("'op' at the start of a line", hint="an operator starts with: op name(A: f32[M, K]) -> Y: f32[M]:")
        self.advance()
        name = self.expect_name("an operator name").text
        self.expect("(")
        inputs = [self.decl()]
        while self.at(","):
            self.advance()
            inputs.append(self.decl())
        self.expect(")", hint="separate parameters with ','")
        self.expect("->", hint="after the inputs comes '-> Y: f32[...]'")
        outputs = self.outputs()
        self.expect(":", hint="the signature line ends with ':'")
        if self.tok.kind != "NEWLINE":
            raise self.error("end of line after ':'")
        self.skip_newlines()
        stmts: list[Stmt] = []
        while self.tok.kind not in ("EOF",) and not (self.at("op") and not self.tok.indented):
            if not self.tok.indented:
                raise self.error("an indented statement", hint="statements are indented under the 'op' line")
            stmts.append(self.stmt())
            if len(stmts) > MAX_STATEMENTS:
                raise OdlError(f"more than {MAX_STATEMENTS} statements in one operator",
                               stmts[-1].line, 1, "split the operator")
            self.skip_newlines()
        if not stmts:
            raise self.error("at least one indented statement", hint="e.g.  Y[i] = X[i] * 2")
        return Op(name, tuple(inputs), tuple(outputs), tuple(stmts), line=head.line,
                  source=self.source)

    def outputs(self) -> list[TensorDecl]:
        if self.at("("):
            self.advance()
            outs = [self.decl(output=True)]
            while self.at(","):
                self.advance()
                outs.append(self.decl(output=True))
            self.expect(")")
            return outs
        outs = [self.decl(output=True)]
        while self.at(","):
            self.advance()
            outs.append(self.decl(output=True))
        return outs

    def decl(self, output: bool = False) -> TensorDecl:
        name_tok = self.expect_name("a tensor name")
        self.expect(":", hint=f"declare it as {name_tok.text}: f32[N]")
        dtype_tok = self.tok
        if dtype_tok.kind != "NAME" or dtype_tok.text not in _DTYPES:
            raise self.error("an element type (" + ", ".join(_DTYPES) + ")")
        self.advance()
        self.expect("[", hint="a shape follows the type, e.g. f32[M, N] (f32[] for a scalar)")
        shape: list[Affine] = []
        locs: list[tuple[int, int]] = []
        if not self.at("]"):
            self.located_affine("a shape expression", shape, locs)
            while self.at(","):
                self.advance()
                self.located_affine("a shape expression", shape, locs)
        self.expect("]")
        alias = None
        if output and self.at("aliases"):  # `Y: f32[N] aliases X`: Y is written over input X
            self.advance()
            alias = self.expect_name("the input this output is written over").text
        return TensorDecl(name_tok.text, _DTYPES[dtype_tok.text], tuple(shape), name_tok.line,
                          alias, tuple(locs))

    def stmt(self) -> Stmt:
        target = self.expect_name("a tensor name to assign")
        indices: list[str] = []
        extents: list[tuple[str, Affine]] = []
        if self.at("["):
            self.advance()
            if not self.at("]"):
                self.index_binding(indices, extents, "an index name")
                while self.at(","):
                    self.advance()
                    self.index_binding(indices, extents, "an index name")
            self.expect("]", hint="the left side names plain indices, e.g. Y[i, j]")
        self.expect("=", hint="a statement reads  Y[i] = expression")
        expr = self.expr()
        if self.tok.kind != "NEWLINE":
            raise self.error("end of statement (an operator like + - * / or a newline)")
        return Stmt(target.text, tuple(indices), expr, target.line, tuple(extents))

    def index_binding(self, names: list[str], extents: list[tuple[str, Affine]], what: str) -> None:
        """`i` or `i: N` (an index with its extent written out)."""
        name = self.expect_name(what).text
        names.append(name)
        if self.at(":"):
            self.advance()
            extents.append((name, self.affine("an index extent")))

    # ------------------------------------------------------------ expressions
    def expr(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise OdlError("expression nested too deeply", self.tok.line, self.tok.column,
                           f"keep nesting below {MAX_DEPTH}")
        try:
            return self.or_expr()
        finally:
            self.depth -= 1

    def or_expr(self) -> Expr:
        node = self.and_expr()
        while self.at("or"):
            self.advance()
            node = Binary("or", node, self.and_expr())
        return node

    def and_expr(self) -> Expr:
        node = self.not_expr()
        while self.at("and"):
            self.advance()
            node = Binary("and", node, self.not_expr())
        return node

    def not_expr(self) -> Expr:
        if self.at("not"):
            self.advance()
            return Unary("not", self.not_expr())
        return self.comparison()

    def comparison(self) -> Expr:
        node = self.additive()
        if self.tok.kind == "PUNCT" and self.tok.text in _COMPARE:
            op = _COMPARE[self.advance().text]
            node = Binary(op, node, self.additive())
        return node

    def additive(self) -> Expr:
        node = self.term()
        while self.at("+") or self.at("-"):
            op = "add" if self.advance().text == "+" else "sub"
            node = Binary(op, node, self.term())
        return node

    def term(self) -> Expr:
        node = self.unary()
        while self.at("*") or self.at("/"):
            op = "mul" if self.advance().text == "*" else "div"
            node = Binary(op, node, self.unary())
        return node

    def unary(self) -> Expr:
        if self.at("-"):
            minus = self.advance()
            operand = self.unary()
            if isinstance(operand, Const):
                return Const(-operand.value, operand.is_int, (minus.line, minus.column))
            return Unary("neg", operand)
        if self.at("+"):
            self.advance()
            return self.unary()
        return self.power()

    def power(self) -> Expr:
        base = self.primary()
        if self.at("**"):
            self.advance()
            return Call("pow", (base, self.unary()))
        return base

    def primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "NUMBER":
            self.advance()
            return number_literal(tok.text, tok.line, tok.column)
        if self.at("("):
            self.advance()
            node = self.expr()
            self.expect(")", hint="unbalanced parenthesis")
            return node
        if tok.kind != "NAME" or tok.text in KEYWORDS:
            raise self.error("a number, a name, a tensor access or '('")
        self.advance()
        name = tok.text
        loc = (tok.line, tok.column)
        if name in REDUCTIONS and self.at("["):
            self.expect("[")
            indices: list[str] = []
            extents: list[tuple[str, Affine]] = []
            self.index_binding(indices, extents, "a reduction index")
            while self.at(","):
                self.advance()
                self.index_binding(indices, extents, "a reduction index")
            self.expect("]", hint="e.g. sum[k](...) or max[r: 2](...)")
            body = self.paren_body(f"{name}[...]")
            return Reduce(name, tuple(indices), body, loc, tuple(extents))
        if name in SCANS:
            if not self.at("["):
                raise self.error("'[' and the scan index", hint=f"{name}[j](X[i, j])")
            indices = self.name_list("a scan index")
            if len(indices) != 1:
                raise OdlError(f"{name} runs along exactly one index", tok.line, tok.column)
            return Scan(name, indices[0], self.paren_body(f"{name}[...]"), loc)
        if self.at("["):
            return self.access(name, loc)
        if self.at("("):
            return self.call(name, tok)
        return Var(name, loc)

    def name_list(self, what: str) -> list[str]:
        self.expect("[")
        names = [self.expect_name(what).text]
        while self.at(","):
            self.advance()
            names.append(self.expect_name(what).text)
        self.expect("]")
        return names

    def paren_body(self, what: str) -> Expr:
        self.expect("(", hint=f"{what} is followed by its body in parentheses")
        body = self.expr()
        self.expect(")")
        return body

    def access(self, name: str, loc: tuple[int, int]) -> Access:
        self.expect("[")
        indices: list[Affine] = []
        locs: list[tuple[int, int]] = []
        if not self.at("]"):
            self.located_affine("an index expression", indices, locs)
            while self.at(","):
                self.advance()
                self.located_affine("an index expression", indices, locs)
        self.expect("]", hint="separate indices with ','")
        return Access(name, tuple(indices), None, loc, tuple(locs))

    def call(self, name: str, tok: Token) -> Expr:
        self.expect("(")
        args = [self.expr()]
        while self.at(","):
            self.advance()
            args.append(self.expr())
        self.expect(")", hint="close the argument list")
        arity = {"where": 3, "pad": 2, **{f: 1 for f in UNARY_FUNCTIONS},
                 **{f: 2 for f in BINARY_FUNCTIONS}, **{d: 1 for d in _DTYPES}}
        if name not in arity:
            known = ", ".join(sorted(set(UNARY_FUNCTIONS) | set(BINARY_FUNCTIONS) | SPECIAL_CALLS))
            raise OdlError(f"unknown function '{name}'", tok.line, tok.column,
                           f"known functions: {known}; casts: {', '.join(_DTYPES)}")
        if len(args) != arity[name]:
            raise OdlError(f"'{name}' takes {arity[name]} argument(s), got {len(args)}",
                           tok.line, tok.column)
        if name in _DTYPES:
            return Cast(_DTYPES[name], args[0])
        if name == "pad":
            target, fill = args
            if not isinstance(target, Access) or not isinstance(fill, Const):
                raise OdlError("pad takes a tensor access and a number: pad(X[i - 1], 0)",
                               tok.line, tok.column)
            if not target.indices:  # a scalar read never leaves its tensor: nothing to pad
                return target
            return Access(target.tensor, target.indices, fill.value, target.loc, target.index_locs)
        return Call(name, tuple(args))

    def located_affine(self, what: str, forms: list[Affine], locs: list[tuple[int, int]]) -> None:
        """Parse an affine form into `forms` and where it starts into `locs`."""
        locs.append((self.tok.line, self.tok.column))
        forms.append(self.affine(what))

    def affine(self, what: str) -> Affine:
        start = self.tok
        node = self.additive()
        form = _to_affine(node)
        if form is None:
            raise OdlError(f"{what} must be affine: integer multiples of names plus a constant",
                           start.line, start.column, "e.g. h + r, 2*i + 1, N - 1")
        if any(abs(v) > INDEX_LIMIT for v in (form.const, *(c for _, c in form.terms))):
            raise OdlError(f"{what} has a number beyond 2**62 (the index range)",
                           start.line, start.column, "indices and shapes are 64-bit integers")
        return form



def _to_affine(node: Expr) -> Affine | None:
    """Affine form of an index expression, or None when it is not affine."""
    if isinstance(node, Const):
        return Affine.constant(int(node.value)) if node.is_int else None
    if isinstance(node, Var):
        return Affine.of(node.name)
    if isinstance(node, Unary) and node.op == "neg":
        inner = _to_affine(node.operand)
        return inner.scale(-1) if inner is not None else None
    if isinstance(node, Binary) and node.op in ("add", "sub"):
        lhs, rhs = _to_affine(node.lhs), _to_affine(node.rhs)
        if lhs is None or rhs is None:
            return None
        return lhs + rhs if node.op == "add" else lhs - rhs
    if isinstance(node, Binary) and node.op == "mul":
        lhs, rhs = _to_affine(node.lhs), _to_affine(node.rhs)
        if lhs is None or rhs is None:
            return None
        if lhs.is_constant:
            return rhs.scale(lhs.const)
        if rhs.is_constant:
            return lhs.scale(rhs.const)
    return None
