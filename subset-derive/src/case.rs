//! Name conversions: serde's `rename_all` rules (applied to field names exactly as serde applies
//! them) and the conversions the derive itself needs for defaults and generated names.

/// One of serde's `rename_all` rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenameRule {
    Lower,
    Upper,
    Pascal,
    Camel,
    Snake,
    ScreamingSnake,
    Kebab,
    ScreamingKebab,
}

impl RenameRule {
    /// The rule serde accepts under this name, if any.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "lowercase" => RenameRule::Lower,
            "UPPERCASE" => RenameRule::Upper,
            "PascalCase" => RenameRule::Pascal,
            "camelCase" => RenameRule::Camel,
            "snake_case" => RenameRule::Snake,
            "SCREAMING_SNAKE_CASE" => RenameRule::ScreamingSnake,
            "kebab-case" => RenameRule::Kebab,
            "SCREAMING-KEBAB-CASE" => RenameRule::ScreamingKebab,
            _ => return None,
        })
    }

    /// Renames a (snake_case) struct field the way serde does: Rust field names are assumed to be
    /// snake_case already, so `lowercase` and `snake_case` leave them unchanged.
    pub(crate) fn apply_to_field(self, field: &str) -> String {
        match self {
            RenameRule::Lower | RenameRule::Snake => field.to_owned(),
            RenameRule::Upper | RenameRule::ScreamingSnake => field.to_ascii_uppercase(),
            RenameRule::Pascal => {
                let mut pascal = String::with_capacity(field.len());
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            RenameRule::Camel => {
                let pascal = RenameRule::Pascal.apply_to_field(field);
                let mut chars = pascal.chars();
                match chars.next() {
                    Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
                    None => pascal,
                }
            }
            RenameRule::Kebab => field.replace('_', "-"),
            RenameRule::ScreamingKebab => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

/// `DeliveryShop` → `delivery_shop`, `HTTPServer` → `http_server`: a new word starts at an upper
/// case letter that follows a lower case letter or digit, or that ends a run of capitals.
pub(crate) fn type_to_snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut snake = String::with_capacity(name.len() + 4);
    for (i, &ch) in chars.iter().enumerate() {
        if ch.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_is_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            if prev.is_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_uppercase() && next_is_lower)
            {
                snake.push('_');
            }
        }
        snake.extend(ch.to_lowercase());
    }
    snake
}

/// `recent_reviews` → `RECENT_REVIEWS` (and `recentReviews` → `RECENT_REVIEWS`): the name of the
/// associated constant generated for a subset field.
pub(crate) fn field_to_screaming_snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for ch in name.chars() {
        if ch.is_uppercase() && prev_lower {
            out.push('_');
        }
        prev_lower = ch.is_lowercase() || ch.is_ascii_digit();
        out.extend(ch.to_uppercase());
    }
    out
}

/// A plausible collection name for a type, used only in suggestions: `Review` → `reviews`,
/// `Category` → `categories`, `Box` → `boxes`.
pub(crate) fn collection_suggestion(type_name: &str) -> String {
    let mut name = type_to_snake_case(type_name);
    let bytes = name.as_bytes();
    let ends_consonant_y = bytes.len() >= 2
        && bytes[bytes.len() - 1] == b'y'
        && !b"aeiou".contains(&bytes[bytes.len() - 2]);
    if ends_consonant_y {
        name.pop();
        name.push_str("ies");
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| name.ends_with(e))
    {
        name.push_str("es");
    } else if !name.is_empty() {
        name.push('s');
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_rules_match_serde() {
        let cases = [
            (RenameRule::Lower, "created_at", "created_at"),
            (RenameRule::Upper, "created_at", "CREATED_AT"),
            (RenameRule::Pascal, "created_at", "CreatedAt"),
            (RenameRule::Camel, "created_at", "createdAt"),
            (RenameRule::Snake, "created_at", "created_at"),
            (RenameRule::ScreamingSnake, "created_at", "CREATED_AT"),
            (RenameRule::Kebab, "created_at", "created-at"),
            (RenameRule::ScreamingKebab, "created_at", "CREATED-AT"),
            (RenameRule::Camel, "_id", "id"),
            (RenameRule::Camel, "a", "a"),
            (RenameRule::Pascal, "x__y_", "XY"),
            (RenameRule::Camel, "rating2_value", "rating2Value"),
        ];
        for (rule, field, expected) in cases {
            assert_eq!(rule.apply_to_field(field), expected, "{rule:?} on {field}");
        }
    }

    #[test]
    fn rename_rule_names() {
        for name in [
            "lowercase",
            "UPPERCASE",
            "PascalCase",
            "camelCase",
            "snake_case",
            "SCREAMING_SNAKE_CASE",
            "kebab-case",
            "SCREAMING-KEBAB-CASE",
        ] {
            assert!(RenameRule::from_name(name).is_some(), "{name}");
        }
        assert_eq!(RenameRule::from_name("camelcase"), None);
    }

    #[test]
    fn type_names_to_snake_case() {
        assert_eq!(type_to_snake_case("Product"), "product");
        assert_eq!(type_to_snake_case("DeliveryShop"), "delivery_shop");
        assert_eq!(type_to_snake_case("HTTPServer"), "http_server");
        assert_eq!(type_to_snake_case("Shop2Go"), "shop2_go");
    }

    #[test]
    fn const_names() {
        assert_eq!(
            field_to_screaming_snake_case("recent_reviews"),
            "RECENT_REVIEWS"
        );
        assert_eq!(
            field_to_screaming_snake_case("recentReviews"),
            "RECENT_REVIEWS"
        );
    }

    #[test]
    fn collection_suggestions() {
        assert_eq!(collection_suggestion("Review"), "reviews");
        assert_eq!(collection_suggestion("Category"), "categories");
        assert_eq!(collection_suggestion("Box"), "boxes");
        assert_eq!(collection_suggestion("DeliveryShop"), "delivery_shops");
    }
}
