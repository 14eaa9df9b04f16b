//! `idutil lease release`: freeing a shard's lease that never expires by
//! itself ([`idutil::lease::release`]).

use std::io::Write;

use crate::args::Common;
use crate::report::CommandError;
use crate::BoxError;

pub(crate) fn release(common: &Common, out: &mut impl Write) -> Result<(), BoxError> {
    let Some(config) = common.lease() else {
        return Err(CommandError::Usage(
            "no lease: give --lease URL or set IDUTIL_LEASE_URL".to_string(),
        )
        .into());
    };
    let Some(shard) = common.shard else {
        return Err(CommandError::Usage(
            "name the shard whose lease to release: --shard N".to_string(),
        )
        .into());
    };
    let released = idutil::lease::release(&config, &common.layout(), shard)?;
    writeln!(
        out,
        "released shard {shard} of ID space {:?}: its lease (holder {}, expiring {}) is free; \
         its mark is kept",
        config.get_prefix(),
        released.holder.as_deref().unwrap_or("none"),
        released.expires_at
    )?;
    Ok(())
}
