//! The admin's create-a-sale form: what was typed, the sale it asks for,
//! and, when it is refused, why, in the form's own words.
//!
//! Each field has a `name`, the JSON API's and the sale builder's
//! (`stock`), and a label, the words the page shows beside it ("Units").
//! A refusal names the field by its label, before the builder's rule
//! ("Units must be between 1 and 1000000"): the admin reads the page, not
//! the API. The API keeps its names and its stable `invalid_request` code.

use chrono::Utc;
use serde::Deserialize;

use seckill_core::domain::{InvalidSale, NewSale, RoomMode, RoomSettings};

/// Each field's `name` and its label: the page shows the label beside
/// the field (`admin.html` asks [`label`] for it), and a refusal names the
/// field by it.
const LABELS: [(&str, &str); 9] = [
    ("name", "Name"),
    ("stock", "Units"),
    ("price_cents", "Price in cents"),
    ("starts_in_secs", "Opens in (seconds)"),
    ("duration_secs", "Stays open for (seconds)"),
    ("waiting_room", "Waiting room"),
    ("admit_per_sec", "Room's admissions per second"),
    ("max_active", "Room's buyers admitted at once"),
    ("admission_secs", "Room's admission length (seconds)"),
];

/// The label of the field `name`.
pub(super) fn label(name: &str) -> &'static str {
    LABELS
        .iter()
        .find(|(field, _)| *field == name)
        .map(|(_, label)| *label)
        .expect("every field the form marks or labels is in LABELS")
}

/// The create-a-sale form as typed: every field a string, so that a
/// value that is not a number comes back to the admin as typed, with the
/// field marked, instead of a parse error that loses the form.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub(crate) struct NewSaleForm {
    pub(super) name: String,
    pub(super) stock: String,
    pub(super) price_cents: String,
    /// Seconds from now until the sale opens.
    pub(super) starts_in_secs: String,
    /// Seconds the sale stays open; empty for no end.
    pub(super) duration_secs: String,
    /// `fifo` or `lottery` for a waiting room; empty or `none` for none.
    pub(super) waiting_room: String,
    /// The room's settings; read only with a room.
    pub(super) admit_per_sec: String,
    pub(super) max_active: String,
    pub(super) admission_secs: String,
}

/// What the form shows before anything is typed.
impl Default for NewSaleForm {
    fn default() -> Self {
        Self {
            name: String::new(),
            stock: "10".to_owned(),
            price_cents: "99900".to_owned(),
            starts_in_secs: "30".to_owned(),
            duration_secs: String::new(),
            waiting_room: String::new(),
            admit_per_sec: "50".to_owned(),
            max_active: "100".to_owned(),
            admission_secs: "120".to_owned(),
        }
    }
}

/// Why the form was refused: the message, and the field (its `name`) at
/// fault, which the page marks.
pub(super) struct Refused {
    pub(super) field: &'static str,
    pub(super) message: String,
}

impl Refused {
    /// The field `name` refused: its label, then what it must be.
    fn new(field: &'static str, rule: &str) -> Self {
        Self {
            field,
            message: format!("{} {rule}", label(field)),
        }
    }
}

impl NewSaleForm {
    /// The field `name`, as a whole number, or why not.
    fn number<T: std::str::FromStr>(raw: &str, name: &'static str) -> Result<T, Refused> {
        raw.trim()
            .parse()
            .map_err(|_| Refused::new(name, &format!("must be a whole number, not {raw:?}")))
    }

    /// The sale the form asks for, or why not, naming the field at fault
    /// (the ranges are the sale builder's to check).
    pub(super) fn sale(&self) -> Result<NewSale, Refused> {
        let mut new = NewSale::builder(self.name.as_str(), Self::number(&self.stock, "stock")?)
            .price_cents(Self::number(&self.price_cents, "price_cents")?)
            .starts_in(Self::number(&self.starts_in_secs, "starts_in_secs")?);
        if !self.duration_secs.trim().is_empty() {
            new = new.lasts(Self::number(&self.duration_secs, "duration_secs")?);
        }
        if let Some(room) = self.room()? {
            new = new.waiting_room(room);
        }
        new.build(Utc::now()).map_err(|invalid| {
            let field = match invalid {
                InvalidSale::EmptyName
                | InvalidSale::NameTooLong
                | InvalidSale::ControlCharacter => "name",
                InvalidSale::Stock => "stock",
                InvalidSale::Price => "price_cents",
                // The form's start is seconds from now: never before 1970.
                InvalidSale::StartsTooLate | InvalidSale::StartsBeforeEpoch => "starts_in_secs",
                InvalidSale::Duration
                | InvalidSale::EndsBeforeStart
                | InvalidSale::EndsInThePast => "duration_secs",
                InvalidSale::RoomRate => "admit_per_sec",
                InvalidSale::RoomActive => "max_active",
                InvalidSale::RoomAdmission => "admission_secs",
                // The form sets no `max_line`: this cannot come from it.
                InvalidSale::RoomLine => "waiting_room",
            };
            Refused::new(field, &invalid.rule())
        })
    }

    /// The room the form asks for: `Ok(None)` for none.
    fn room(&self) -> Result<Option<RoomSettings>, Refused> {
        let mode = match self.waiting_room.trim() {
            "" | "none" => return Ok(None),
            raw => RoomMode::parse(raw).ok_or_else(|| {
                Refused::new(
                    "waiting_room",
                    &format!("must be none, fifo or lottery, not {raw:?}"),
                )
            })?,
        };
        Ok(Some(RoomSettings {
            mode,
            admit_per_sec: Self::number(&self.admit_per_sec, "admit_per_sec")?,
            max_active: Self::number(&self.max_active, "max_active")?,
            admission_secs: Self::number(&self.admission_secs, "admission_secs")?,
            max_line: None,
        }))
    }
}
