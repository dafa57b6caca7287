//! The worst-case cost of a check's expression, read from its syntax tree before it is ever
//! evaluated: the CRD admits 2,048 characters, and nested comprehensions over literal lists of
//! that size would run for hours. The estimate counts the nodes an evaluation visits, each
//! comprehension's body once per element of its range; a range whose size the expression does not
//! say (a field of the object read) counts as [`UNKNOWN_SIZE`] elements. What the estimate cannot
//! see (an object with a longer list) the shell bounds in time (`src/runtime/checks.rs`).

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// The elements a list or map is taken to hold when the expression does not say.
pub const UNKNOWN_SIZE: u64 = 1_000;
/// The most an expression may cost: about as many nodes visited as Kubernetes' own per-expression
/// limit for CRD validation rules (`perCallLimit`, 1,000,000).
pub const MAX_COST: u64 = 1_000_000;

/// The estimated worst-case cost of `expr`: saturates at `u64::MAX`.
pub fn cost(expr: &IdedExpr) -> u64 {
    match &expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => 1,
        Expr::Select(select) => 1u64.saturating_add(cost(&select.operand)),
        Expr::Call(call) => (call.target.iter().map(|t| cost(t)))
            .chain(call.args.iter().map(cost))
            .fold(1, u64::saturating_add),
        Expr::List(list) => list.elements.iter().map(cost).fold(1, u64::saturating_add),
        Expr::Map(map) => entries_cost(&map.entries),
        Expr::Struct(s) => entries_cost(&s.entries),
        Expr::Comprehension(c) => {
            let body = cost(&c.loop_cond).saturating_add(cost(&c.loop_step));
            cost(&c.iter_range)
                .saturating_add(cost(&c.accu_init))
                .saturating_add(size(&c.iter_range).saturating_mul(body))
                .saturating_add(cost(&c.result))
        }
    }
}

fn entries_cost(entries: &[cel::common::ast::IdedEntryExpr]) -> u64 {
    entries
        .iter()
        .map(|e| match &e.expr {
            EntryExpr::MapEntry(m) => cost(&m.key).saturating_add(cost(&m.value)),
            EntryExpr::StructField(f) => cost(&f.value),
        })
        .fold(1, u64::saturating_add)
}

/// How many elements `expr` may have, when it is iterated over.
fn size(expr: &IdedExpr) -> u64 {
    match &expr.expr {
        Expr::List(list) => list.elements.len() as u64,
        Expr::Map(map) => map.entries.len() as u64,
        // A concatenation holds both sides.
        Expr::Call(call) if call.func_name == "_+_" && call.args.len() == 2 => {
            size(&call.args[0]).saturating_add(size(&call.args[1]))
        }
        // `map` and `filter` give at most an element for each of their range's.
        Expr::Comprehension(c) => size(&c.iter_range),
        _ => UNKNOWN_SIZE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(expr: &str) -> u64 {
        let program = cel::Program::compile(expr).expect("compiles");
        cost(program.expression())
    }

    #[test]
    fn ordinary_checks_cost_little() {
        for expr in [
            "status.ceph.health == 'HEALTH_OK'",
            "has(status.readyReplicas) && status.readyReplicas == spec.replicas",
            "status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
            "spec.containers.all(c, c.image.startsWith('registry.example.com/'))",
        ] {
            assert!(of(expr) <= MAX_COST / 10, "{expr}: {}", of(expr));
        }
    }

    #[test]
    fn a_comprehension_costs_its_body_once_per_element() {
        let three = of("[1, 2, 3].all(x, x > 0)");
        let six = of("[1, 2, 3, 4, 5, 6].all(x, x > 0)");
        assert!(six > three + 3, "linear: {three} {six}");
        // Nested: the product of the ranges.
        let n3 = of("[1, 2, 3].all(x, [1, 2, 3].all(y, x + y > 0))");
        let n6 = of("[1, 2, 3, 4, 5, 6].all(x, [1, 2, 3, 4, 5, 6].all(y, x + y > 0))");
        assert!(n6 > 3 * n3, "quadratic: {n3} {n6}");
        // Over a field of the object: its size is not known, so UNKNOWN_SIZE.
        assert!(of("spec.items.all(x, x > 0)") >= UNKNOWN_SIZE);
        assert!(of("spec.a.all(x, spec.b.all(y, spec.c.all(z, x == y)))") > MAX_COST);
    }

    #[test]
    fn the_worst_expressions_the_crd_admits_are_over_the_limit() {
        // Ten nested comprehensions over ten elements: 10^10 steps, within 2,048 characters.
        let list = "[0,1,2,3,4,5,6,7,8,9]";
        let mut expr = "true".to_string();
        for i in 0..10 {
            expr = format!("{list}.all(v{i}, {expr})");
        }
        assert!(expr.len() <= 2048, "{}", expr.len());
        assert!(of(&expr) > MAX_COST, "{}", of(&expr));
        // One comprehension over a literal list as long as the field allows.
        let long = format!("[{}].all(x, x == 0)", vec!["0"; 1000].join(","));
        assert!(long.len() <= 2048);
        assert!(
            of(&long) < MAX_COST,
            "a thousand steps are fine: {}",
            of(&long)
        );
        // Concatenations of unknown lists, nested.
        let cat = "(spec.a + spec.a + spec.a).all(x, (spec.a + spec.a).all(y, x == y))";
        assert!(of(cat) > MAX_COST, "{}", of(cat));
    }
}
