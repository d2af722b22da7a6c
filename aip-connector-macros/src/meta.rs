//! A small attribute grammar: `key`, `key = <expr>`, `key(<items>)`, separated by commas.
//!
//! `syn::meta` cannot hold keyword keys such as `async` nor arbitrary expressions after `=`, so
//! the attribute is parsed into this tree first and interpreted section by section (`attr.rs`).
//! Every node keeps the user's tokens so errors land on what the user wrote.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, discouraged::Speculative};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

/// One `key`, `key = value` or `key(...)` item.
pub(crate) struct MetaItem {
    pub(crate) key: Ident,
    pub(crate) kind: MetaKind,
}

pub(crate) enum MetaKind {
    /// `key`
    Flag,
    /// `key = <expr>`
    Value(Expr),
    /// `key(<items>)`
    List(Vec<MetaItem>),
}

impl MetaItem {
    /// The key as written.
    pub(crate) fn name(&self) -> String {
        self.key.unraw().to_string()
    }

    /// Span covering the key and its value, for errors about the whole item.
    pub(crate) fn span(&self) -> Span {
        match &self.kind {
            MetaKind::Value(expr) => self.key.span().join(expr.span()).unwrap_or(self.key.span()),
            _ => self.key.span(),
        }
    }
}

impl Parse for MetaItem {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // syn's own "expected ident" / "expected `,`" name no fix.
        if !input.peek(Ident::peek_any) {
            return Err(input.error(
                "expected a key: items are `key = value`, `key(...)` or a bare `key`, separated by commas, e.g. `id = \"orders\"`",
            ));
        }
        let key = Ident::parse_any(input)?;
        let kind = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            MetaKind::Value(parse_value(input)?)
        } else if input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            MetaKind::List(parse_items(&content)?)
        } else {
            if !(input.is_empty() || input.peek(Token![,])) {
                return Err(input.error(format!(
                    "after `{key}`, write `= value` or `(...)`; items are separated by commas"
                )));
            }
            MetaKind::Flag
        };
        Ok(MetaItem { key, kind })
    }
}

/// A value: a bare keyword such as `async` (which is not an expression) becomes a path, so
/// `expected = async` reads like every other enum value; anything else is an expression.
fn parse_value(input: ParseStream<'_>) -> syn::Result<Expr> {
    let fork = input.fork();
    if let Ok(ident) = Ident::parse_any(&fork)
        && (fork.is_empty() || fork.peek(Token![,]))
        && !input.peek(syn::Lit)
    {
        input.advance_to(&fork);
        return Ok(Expr::Path(syn::ExprPath {
            attrs: Vec::new(),
            qself: None,
            path: ident.into(),
        }));
    }
    if input.peek(syn::token::Bracket) {
        let fork = input.fork();
        let error = match fork.parse::<Expr>() {
            Ok(expr) => {
                input.advance_to(&fork);
                return Ok(expr);
            }
            Err(error) => error,
        };
        // `scopes = [invoices:write]`: syn's "expected `,` or `;`" at the `:` named no fix, and
        // stopped the whole attribute. Read the brackets item by item instead, so the key's own
        // parser reports the item it cannot take, saying what it takes.
        // Only for text written without quotes: any other item that is no expression (a missing
        // comma, `["a" "b"]`) keeps syn's error, which points at the missing comma.
        let fork = input.fork();
        return match array_of_items(&fork) {
            Ok(expr) if (fork.is_empty() || fork.peek(Token![,])) && holds_unquoted_text(&expr) => {
                input.advance_to(&fork);
                Ok(expr)
            }
            _ => Err(error),
        };
    }
    input.parse()
}

/// Whether one of `array`'s items that is no expression is [`unquoted_text`].
fn holds_unquoted_text(array: &Expr) -> bool {
    let Expr::Array(array) = array else {
        return false;
    };
    array
        .elems
        .iter()
        .any(|item| matches!(item, Expr::Verbatim(_)) && unquoted_text(item).is_some())
}

/// `[...]` that is no expression, as an array of its comma-separated items: each item that is no
/// expression (`invoices:write`) is kept as its tokens, an `Expr::Verbatim`, for the key's
/// parser to report. An empty item (`[a,,b]`) is no array.
fn array_of_items(input: ParseStream<'_>) -> syn::Result<Expr> {
    let content;
    let bracket_token = syn::bracketed!(content in input);
    let tokens: proc_macro2::TokenStream = content.parse()?;
    let mut items = vec![proc_macro2::TokenStream::new()];
    let mut trailing_comma = false;
    for tree in tokens {
        trailing_comma = matches!(&tree, proc_macro2::TokenTree::Punct(p) if p.as_char() == ',');
        if trailing_comma {
            items.push(proc_macro2::TokenStream::new());
        } else {
            items.last_mut().expect("never empty").extend([tree]);
        }
    }
    if trailing_comma {
        items.pop();
    }
    let mut elems = Punctuated::new();
    for item in items {
        if item.is_empty() {
            return Err(input.error("an empty item"));
        }
        elems.push(syn::parse2::<Expr>(item.clone()).unwrap_or(Expr::Verbatim(item)));
    }
    Ok(Expr::Array(syn::ExprArray {
        attrs: Vec::new(),
        bracket_token,
        elems,
    }))
}

/// Parses a comma-separated list of items (trailing comma allowed).
pub(crate) fn parse_items(input: ParseStream<'_>) -> syn::Result<Vec<MetaItem>> {
    Ok(Punctuated::<MetaItem, Token![,]>::parse_terminated(input)?
        .into_iter()
        .collect())
}

/// The top-level attribute arguments.
pub(crate) struct MetaArgs(pub(crate) Vec<MetaItem>);

impl Parse for MetaArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        parse_items(input).map(MetaArgs)
    }
}

/// Reports every literal of `tokens` (an attribute's arguments, at any depth) written with a
/// suffix, on the literal: the value is read without it, so `timeout_ms = 300u8` would publish
/// `300` with a `u8` nothing checks, and `id = "x"suffix` would drop `suffix` unsaid.
pub(crate) fn refuse_literal_suffixes(cx: &crate::ctxt::Ctxt, tokens: &proc_macro2::TokenStream) {
    for tree in tokens.clone() {
        match tree {
            proc_macro2::TokenTree::Group(group) => refuse_literal_suffixes(cx, &group.stream()),
            proc_macro2::TokenTree::Literal(literal) => {
                let lit = Lit::new(literal);
                if !lit.suffix().is_empty() {
                    cx.error_spanned_by(
                        &lit,
                        format!(
                            "remove the suffix `{}`: {}",
                            lit.suffix(),
                            crate::diagnostics::LITERAL_SUFFIX.message
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}

/// A string literal, if `expr` is one.
pub(crate) fn as_str(expr: &Expr) -> Option<LitStr> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.clone()),
        Expr::Group(group) => as_str(&group.expr),
        _ => None,
    }
}

/// The message for `name = expr` where a string literal is required. A constant's path
/// (`Self::BOOK_ID`, `BOOK_ID`) gets the reason: the macro reads the value while it expands,
/// before any constant has one. A bare lowercase word is text missing its quotes.
pub(crate) fn string_literal_required(name: &str, expr: &Expr) -> String {
    // A lone lowercase word (`id = cap_demo_look`) is most likely text missing its quotes.
    let is_bare_word = |path: &syn::ExprPath| {
        path.qself.is_none()
            && path.path.segments.len() == 1
            && path.path.segments[0]
                .ident
                .to_string()
                .chars()
                .any(|c| c.is_ascii_lowercase())
    };
    let why = |shown: String| {
        format!(
            "`{name}` takes a string literal, not {shown}: the attribute is read while the macro expands, before any constant or macro has a value; write the text itself, `{name} = \"...\"`"
        )
    };
    match expr {
        Expr::Path(path) if is_bare_word(path) => {
            format!("`{name}` takes a string literal: write it in quotes, `{name} = \"...\"`")
        }
        Expr::Path(path) => why(format!("`{}`", tokens_shown(path))),
        Expr::Macro(call) => why(format!("`{}!(..)`", tokens_shown(&call.mac.path))),
        _ => format!("`{name}` takes a string literal"),
    }
}

/// "`name` takes an array of string literals: `name = [shown]`", the shape of every list of
/// strings (`shown` is the array's content as it should be written).
pub(crate) fn string_array_required(name: &str, shown: &str) -> String {
    format!("`{name}` takes an array of string literals: `{name} = [{shown}]`")
}

/// The text an item of a list of strings holds when it is text written without its quotes
/// (`invoices:write`, `calendar.read`, `reports`, `crm-*`): words joined by `:`, `.`, `-`, `/`
/// or `*`, the first with a lowercase letter. A constant (`SCOPE`, `Self::SCOPE`) or any other
/// expression is not text.
pub(crate) fn unquoted_text(expr: &Expr) -> Option<String> {
    let mut text = String::new();
    let mut after_word = false;
    for tree in quote::ToTokens::to_token_stream(expr) {
        match tree {
            proc_macro2::TokenTree::Ident(ident) => {
                let word = ident.unraw().to_string();
                let first = text.is_empty();
                if after_word
                    || (first && !word.chars().any(|c| c.is_ascii_lowercase()))
                    || matches!(word.as_str(), "Self" | "self" | "crate" | "super")
                {
                    return None;
                }
                text.push_str(&word);
                after_word = true;
            }
            proc_macro2::TokenTree::Punct(punct)
                if !text.is_empty() && ":.-/*".contains(punct.as_char()) =>
            {
                text.push(punct.as_char());
                after_word = false;
            }
            _ => return None,
        }
    }
    (!text.is_empty()).then_some(text)
}

/// Tokens as the user wrote them, without the spaces `to_string` puts around `::`, `<`, `>`
/// and `!` (`<Self as Trait>::ID`, not `<SelfasTrait>::ID` nor `< Self as Trait > :: ID`).
fn tokens_shown(tokens: &impl quote::ToTokens) -> String {
    let text = tokens.to_token_stream().to_string();
    let mut shown = text.replace(" :: ", "::").replace(":: ", "::");
    for (spaced, tight) in [("< ", "<"), (" >", ">"), (" !", "!"), (" ,", ",")] {
        shown = shown.replace(spaced, tight);
    }
    shown
}

/// Whether `expr` is an integer literal (whatever its value: it may not fit any type).
pub(crate) fn is_int_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(_), ..
        }) => true,
        Expr::Group(group) => is_int_literal(&group.expr),
        _ => false,
    }
}

/// An unsigned integer literal, if `expr` is one that fits in `u64`.
pub(crate) fn as_u64(expr: &Expr) -> Option<u64> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse().ok(),
        Expr::Group(group) => as_u64(&group.expr),
        _ => None,
    }
}

/// A boolean literal, if `expr` is one.
pub(crate) fn as_bool(expr: &Expr) -> Option<bool> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Some(b.value),
        Expr::Group(group) => as_bool(&group.expr),
        _ => None,
    }
}

/// A bare identifier such as `medium` or `async`, if `expr` is one.
pub(crate) fn as_ident(expr: &Expr) -> Option<Ident> {
    match expr {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
            path.path.get_ident().cloned()
        }
        Expr::Group(group) => as_ident(&group.expr),
        _ => None,
    }
}

/// The elements of an array expression `[a, b]`, if `expr` is one.
pub(crate) fn as_array(expr: &Expr) -> Option<Vec<&Expr>> {
    match expr {
        Expr::Array(array) => Some(array.elems.iter().collect()),
        Expr::Group(group) => as_array(&group.expr),
        _ => None,
    }
}

/// The path of `crate = "path"` (the SDK's path for the generated code), its tokens spanned at
/// the literal; an error in `cx` when the value is not a string holding a path.
pub(crate) fn sdk_path(cx: &crate::ctxt::Ctxt, item: &MetaItem) -> Option<syn::Path> {
    const SHAPE: &str = "`crate` takes the SDK's path as a string, as serde's `crate` does: `crate = \"my_platform::aip\"` when the SDK is re-exported by another crate or renamed in Cargo.toml";
    let MetaKind::Value(expr) = &item.kind else {
        cx.error_at(item.span(), SHAPE);
        return None;
    };
    let Some(lit) = as_str(expr) else {
        cx.error_spanned_by(expr, SHAPE);
        return None;
    };
    match lit.parse_with(syn::Path::parse_mod_style) {
        Ok(path) if !path.segments.is_empty() => Some(path),
        _ => {
            cx.error_spanned_by(lit, SHAPE);
            None
        }
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// The closest of `candidates` to `given`, if it is close enough to be a plausible typo.
pub(crate) fn did_you_mean<'a>(given: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|candidate| (edit_distance(given, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len() / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// " (did you mean `x`?)" or nothing.
pub(crate) fn suggestion(given: &str, candidates: &[&str]) -> String {
    did_you_mean(given, candidates)
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// "`a`, `b`, `c`" for messages.
pub(crate) fn one_of(candidates: &[&str]) -> String {
    candidates
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_key_given_a_path_or_macro_says_why() {
        let message = |expr: &str| string_literal_required("id", &syn::parse_str(expr).unwrap());
        assert!(message("cap_demo_look").contains("write it in quotes"));
        for (expr, shown) in [
            ("Self::BOOK_ID", "`Self::BOOK_ID`"),
            ("BOOK_ID", "`BOOK_ID`"),
            ("<Self as Ids>::BOOK_ID", "`<Self as Ids>::BOOK_ID`"),
            ("crate::ids::book", "`crate::ids::book`"),
            ("concat!(\"cap:\", \"x\")", "`concat!(..)`"),
        ] {
            let text = message(expr);
            assert!(text.contains(&format!("not {shown}")), "{expr}: {text}");
            assert!(
                text.contains("before any constant or macro has a value"),
                "{text}"
            );
        }
        assert_eq!(message("5"), "`id` takes a string literal");
    }

    #[test]
    fn unquoted_text_is_words_and_separators() {
        let text = |expr: &str| unquoted_text(&syn::parse_str(expr).unwrap());
        assert_eq!(text("reports").as_deref(), Some("reports"));
        assert_eq!(text("calendar.read").as_deref(), Some("calendar.read"));
        assert_eq!(text("calendar-read").as_deref(), Some("calendar-read"));
        assert_eq!(text("invoices::write").as_deref(), Some("invoices::write"));
        for not_text in ["SCOPE", "Self::SCOPE", "5", "f(x)", "\"quoted\"", "-x"] {
            assert_eq!(text(not_text), None, "{not_text}");
        }
    }

    #[test]
    fn an_array_that_is_no_expression_is_read_item_by_item() {
        let args: MetaArgs =
            syn::parse_str("scopes = [invoices:write, \"a\",], risk = low").unwrap();
        let MetaKind::Value(value) = &args.0[0].kind else {
            panic!("value")
        };
        let items = as_array(value).expect("an array");
        assert!(matches!(items[0], Expr::Verbatim(_)));
        assert_eq!(unquoted_text(items[0]).as_deref(), Some("invoices:write"));
        assert_eq!(as_str(items[1]).unwrap().value(), "a");
        assert_eq!(args.0[1].name(), "risk");
        // An empty item, or tokens after the brackets, keep syn's error.
        assert!(syn::parse_str::<MetaArgs>("scopes = [a:b,,c]").is_err());
        assert!(syn::parse_str::<MetaArgs>("scopes = [a:b] x").is_err());
        // So does a missing comma between items that are each fine: syn's "expected `,`"
        // points at it, where the key's parser would say the item is no string.
        for missing_comma in [
            r#"tags = ["a" "b"]"#,
            "side_effects = [read write]",
            r##"examples = [r#"{}"# r#"{}"#]"##,
        ] {
            let Err(error) = syn::parse_str::<MetaArgs>(missing_comma) else {
                panic!("{missing_comma} parsed");
            };
            assert!(
                error.to_string().contains("expected `,`"),
                "{missing_comma}: {error}"
            );
        }
    }

    #[test]
    fn suggestions_catch_typos_only() {
        assert_eq!(
            did_you_mean("idempotncy", &["idempotency", "execution"]),
            Some("idempotency")
        );
        assert_eq!(did_you_mean("zzz", &["idempotency", "execution"]), None);
    }

    #[test]
    fn parses_keywords_values_and_lists() {
        let args: MetaArgs = syn::parse_str(
            "id = \"cap:x\", execution(sync, async, expected = sync), side_effects = [read], ttl_ms = 5",
        )
        .unwrap();
        let names: Vec<_> = args.0.iter().map(MetaItem::name).collect();
        assert_eq!(names, ["id", "execution", "side_effects", "ttl_ms"]);
        let MetaKind::List(items) = &args.0[1].kind else {
            panic!("list")
        };
        assert_eq!(items[1].name(), "async");
        let args: MetaArgs = syn::parse_str("execution(expected = async), flag = true").unwrap();
        let MetaKind::List(items) = &args.0[0].kind else {
            panic!("list")
        };
        let MetaKind::Value(value) = &items[0].kind else {
            panic!("value")
        };
        assert_eq!(as_ident(value).unwrap().to_string(), "async");
        let MetaKind::Value(flag) = &args.0[1].kind else {
            panic!("value")
        };
        assert_eq!(as_bool(flag), Some(true));
    }
}
