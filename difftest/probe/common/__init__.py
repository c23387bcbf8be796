"""What both probe tiers use: summing SpecDecodingStats, atomic cache folders."""
