package bad

func TestHelperUndocumented() {}
